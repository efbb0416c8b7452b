"""The processor's graph walks: their fast paths give what the full walks give."""

from __future__ import annotations

import gc

import pytest
from onnx import helper

from benanza.collector import collection_paused
from benanza.errors import ModelError
from benanza.model.process import process_model
from benanza.model.resolve import _without_dead_constants
from benanza.model.walks import stable_topological_order, topological_nodes
from benanza.model.zoo import zoo_paths


def _node(name: str, inputs: list[str], outputs: list[str], op: str = "Relu"):
    return helper.make_node(op, inputs, outputs, name=name)


def test_sorted_nodes_come_back_as_they_are():
    nodes = [_node("a", ["x"], ["y"]), _node("b", ["y", "w"], ["z"]), _node("c", ["z", "y"], ["out"])]
    assert topological_nodes(nodes, {"x", "w"}) == nodes


def test_a_node_read_before_it_is_produced_moves_after_its_producer():
    late = _node("late", ["x"], ["y"])
    reader = _node("reader", ["y"], ["z"])
    first = _node("first", ["x"], ["v"])
    assert [n.name for n in topological_nodes([reader, first, late], {"x"})] == ["first", "late", "reader"]


def test_a_node_reading_its_own_output_goes_last_as_a_cycle_does():
    nodes = [_node("a", ["x"], ["y"]), _node("loop", ["y", "z"], ["z"]), _node("c", ["y"], ["w"])]
    assert [n.name for n in topological_nodes(nodes, {"x"})] == ["a", "c", "loop"]


def test_a_subgraph_capturing_a_later_tensor_waits_for_it():
    branch = helper.make_graph(
        [_node("inner", ["late"], ["r"], "Identity")],
        "b",
        [],
        [helper.make_value_info("r", helper.make_tensor_type_proto(1, None))],
    )
    cond = helper.make_node("If", ["c"], ["out"], name="if", then_branch=branch, else_branch=branch)
    late = _node("late_producer", ["x"], ["late"])
    assert [n.name for n in topological_nodes([cond, late], {"x", "c"})] == ["late_producer", "if"]


def test_a_dead_constant_chain_goes_whole_and_what_is_read_stays():
    chain = [_node("c1", [], ["t1"], "Constant"), _node("c2", ["t1"], ["t2"]), _node("c3", ["t2", "t1"], ["t3"])]
    kept_constant = _node("k", [], ["weight"], "Constant")
    layer = _node("layer", ["x", "weight"], ["y"], "Add")
    unread_runtime = _node("unread", ["y"], ["u"])
    output_constant = _node("o", [], ["graph_out"], "Constant")
    nodes = [*chain, kept_constant, layer, unread_runtime, output_constant]
    alive = _without_dead_constants(nodes, {"graph_out"}, {"x", "y", "u"})
    assert [n.name for n in alive] == ["k", "layer", "unread", "o"]


def test_a_constant_read_twice_by_a_dead_node_goes_with_it():
    nodes = [_node("c", [], ["t"], "Constant"), _node("twice", ["t", "t"], ["s"], "Add")]
    assert _without_dead_constants(nodes, set(), set()) == []


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was_after_processing_and_after_a_failure(enabled, tmp_path):
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        process_model(zoo_paths()[0])
        assert gc.isenabled() is enabled
        bad = tmp_path / "bad.onnx"
        bad.write_bytes(b"not a model")
        with pytest.raises(ModelError):
            process_model(bad)
        assert gc.isenabled() is enabled
        with collection_paused():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_stable_topological_order_keeps_index_order_among_the_ready_and_stops_at_a_cycle():
    assert stable_topological_order(4, []) == [0, 1, 2, 3]
    assert stable_topological_order(4, [(3, 0), (2, 1), (3, 0)]) == [2, 1, 3, 0]  # a duplicate edge counts once
    assert stable_topological_order(3, [(0, 1), (1, 0)]) == [2]  # the cycle and what is behind it are left out
