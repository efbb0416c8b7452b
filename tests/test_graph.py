"""The layer DAG: edges in topological order and the critical path."""

from __future__ import annotations

import pytest

from benanza.model.graph import CriticalPath, InputKind, Layer, LayerInput, ModelGraph, TensorSpec

X = TensorSpec("x", (1, 8), "float32")


def layer(index: int, op_type: str = "Relu") -> Layer:
    return Layer(
        index=index,
        name=f"n{index}",
        op_type=op_type,
        domain="",
        opset=17,
        inputs=(LayerInput(X, InputKind.ACTIVATION),),
        outputs=(X,),
        attributes=(),
        flops=8,
        bytes_moved=64,
        layer_key=f"{index:016x}",
    )


def dag(n: int, edges: list[tuple[int, int]]) -> ModelGraph:
    return ModelGraph(
        model="hand",
        path="hand.onnx",
        opset={"": 17},
        inputs=(X,),
        layers=tuple(layer(i) for i in range(n)),
        edges=tuple(edges),
    )


# 0 -> {1, 2} -> 3 -> 4 -> 5 (a diamond, then a chain), and an unconnected chain 6 -> 7
DIAMOND_AND_CHAIN = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (4, 5), (6, 7)]


def test_critical_path_takes_the_heavier_side_of_the_diamond():
    graph = dag(8, DIAMOND_AND_CHAIN)
    costs = [1.0, 5.0, 2.0, 1.0, 3.0, 2.0, 4.0, 4.0]
    assert graph.critical_path(costs) == CriticalPath(12.0, (0, 1, 3, 4, 5))
    costs[1], costs[2] = 2.0, 5.0
    assert graph.critical_path(costs) == CriticalPath(12.0, (0, 2, 3, 4, 5))


def test_critical_path_can_be_a_separate_component():
    graph = dag(8, DIAMOND_AND_CHAIN)
    path = graph.critical_path({i: 1.0 for i in range(6)} | {6: 20.0, 7: 1.5})
    assert path == CriticalPath(21.5, (6, 7))


def test_critical_path_cost_as_sequence_mapping_or_callable():
    graph = dag(8, DIAMOND_AND_CHAIN)
    costs = [1, 5, 2, 1, 3, 2, 4, 4]
    by_sequence = graph.critical_path(costs)
    by_mapping = graph.critical_path(dict(enumerate(costs)))
    by_callable = graph.critical_path(lambda lay: costs[lay.index])
    assert by_sequence == by_mapping == by_callable
    assert isinstance(by_sequence.length, float)


def test_critical_path_unit_cost_counts_the_longest_chain():
    graph = dag(8, DIAMOND_AND_CHAIN)
    path = graph.critical_path(lambda lay: 1)
    assert path.length == 5.0
    assert path.layers == (0, 1, 3, 4, 5)  # ties go to the lower index


def test_critical_path_of_an_empty_and_a_single_layer_graph():
    assert dag(0, []).critical_path([]) == CriticalPath(0.0, ())
    assert dag(1, []).critical_path([2.5]) == CriticalPath(2.5, (0,))


def test_critical_path_without_edges_is_the_costliest_layer():
    assert dag(4, []).critical_path([1, 7, 3, 7]) == CriticalPath(7.0, (1,))


def test_zero_costs_give_a_zero_length_path():
    assert dag(3, [(0, 1), (1, 2)]).critical_path([0, 0, 0]) == CriticalPath(0.0, (0,))


def test_predecessors_and_successors():
    graph = dag(8, [*DIAMOND_AND_CHAIN, (0, 1)])  # a repeated edge counts once
    assert graph.predecessors(3) == (1, 2)
    assert graph.predecessors(0) == ()
    assert graph.successors() == [[1, 2], [3], [3], [4], [5], [], [7], []]


@pytest.mark.parametrize("edge", [(1, 0), (2, 2), (0, 9), (-1, 1)])
def test_edges_must_follow_topological_order(edge):
    with pytest.raises(ValueError, match="topological order"):
        dag(3, [(0, 1), edge])


def test_summary_and_layer_keys():
    graph = dag(3, [(0, 1)])
    assert graph.layer_keys == [f"{i:016x}" for i in range(3)]
    assert graph.summary() == {
        "model": "hand",
        "path": "hand.onnx",
        "opset": {"": 17},
        "inputs": [{"name": "x", "shape": [1, 8], "dtype": "float32"}],
        "layers": 3,
        "unique_layers": 3,
        "unsupported": 0,
        "constant_nodes": 0,
        "shape_method": "",  # a graph made by hand was shaped by no method
        "shaped_by": {},
    }


def test_model_graph_is_frozen():
    graph = dag(2, [(0, 1)])
    with pytest.raises(AttributeError):
        graph.layers = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        graph.layers[0].flops = 1  # type: ignore[misc]


# ------------------------------------------------------------------ the zoo's graphs


@pytest.mark.parametrize("name", ["resnet50", "vgg19", "inception_v1", "densenet121", "shufflenet"])
def test_zoo_edges_follow_topological_order(zoo_model, name):
    graph = zoo_model(name, 1).graph
    assert graph.edges == tuple(sorted(set(graph.edges)))
    assert all(0 <= src < dst < len(graph.layers) for src, dst in graph.edges)
    # every layer but the first reads another layer's output
    assert [i for i in range(len(graph.layers)) if not graph.predecessors(i)] == [0]
    # ... and every layer but the last feeds another
    assert [i for i, succ in enumerate(graph.successors()) if not succ] == [len(graph.layers) - 1]


def test_resnet50_has_parallel_branches(zoo_model):
    graph = zoo_model("resnet50", 1).graph
    path = graph.critical_path(lambda lay: 1)
    assert path.length < len(graph.layers)
    assert path.length == 168  # 4 projection shortcuts (Conv+BN) run beside the main path
    assert path.layers[0] == 0 and path.layers[-1] == len(graph.layers) - 1
    edges = set(graph.edges)
    assert all((a, b) in edges for a, b in zip(path.layers, path.layers[1:], strict=False))
    by_flops = graph.critical_path(lambda lay: lay.flops)
    assert by_flops.length < sum(lay.flops for lay in graph.layers)
    assert by_flops.length >= max(lay.flops for lay in graph.layers)


def test_vgg19_is_a_chain(zoo_model):
    graph = zoo_model("vgg19", 1).graph
    path = graph.critical_path(lambda lay: 1)
    assert path.length == len(graph.layers) == 46
    assert path.layers == tuple(range(46))
    assert graph.edges == tuple((i, i + 1) for i in range(45))
