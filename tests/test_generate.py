"""Benchmark specs (stable ids) and generation: model -> plan -> unique specs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from benanza.bench.generate import batch_size_of, model_key, plan_model, specs_for_plan, unique_specs
from benanza.bench.spec import BenchmarkSpec, SpecKind, canonical_variant, variant_id
from benanza.model.network import Network, NetworkTensor, network_of
from benanza.runtimes.null import NullRuntime
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU

# -- BenchmarkSpec ----------------------------------------------------------------------------

VARIANT = {"threads": 1, "opt": "extended", "ep": "cpu"}
# The id of FIXED below. It changes only when the canonical form of a spec changes, which
# must come with a SPEC_VERSION bump: every stored result would otherwise be orphaned.
FIXED_SPEC_ID = "392ee99347028f16"
FIXED = BenchmarkSpec(
    kind=SpecKind.LAYER,
    key="0123456789abcdef",
    batch_size=1,
    dtype="float32",
    runtime="onnxruntime",
    variant=canonical_variant(VARIANT),
    label="Conv 1x3x8x8",
    network=Network((NetworkTensor((1, 3, 8, 8), "float32"),), (), (), 1),
)


def test_spec_id_is_a_fixed_literal():
    assert FIXED.spec_id == FIXED_SPEC_ID
    assert FIXED.variant_id == "ep=cpu,opt=extended,threads=1"


def test_spec_id_survives_dict_and_json_round_trips():
    back = BenchmarkSpec.from_dict(FIXED.to_dict())
    assert back == FIXED
    assert back.spec_id == FIXED_SPEC_ID
    via_json = BenchmarkSpec.from_dict(json.loads(json.dumps(FIXED.to_dict())))
    assert via_json == FIXED
    assert via_json.spec_id == FIXED_SPEC_ID
    assert via_json.network == FIXED.network
    assert FIXED.to_dict()["spec_id"] == FIXED_SPEC_ID


def test_spec_id_ignores_kind_label_payload_and_variant_order():
    same = [
        dataclasses.replace(FIXED, kind=SpecKind.GROUP),
        dataclasses.replace(FIXED, kind=SpecKind.SEQUENCE, label="something else"),
        dataclasses.replace(FIXED, network=None, model={"path": "x.onnx"}),
        dataclasses.replace(FIXED, variant=canonical_variant(dict(reversed(list(VARIANT.items()))))),
    ]
    assert {s.spec_id for s in same} == {FIXED_SPEC_ID}


@pytest.mark.parametrize(
    "change",
    [
        {"batch_size": 2},
        {"dtype": "float16"},
        {"runtime": "null"},
        {"variant": canonical_variant({**VARIANT, "threads": 2})},
        {"variant": canonical_variant({**VARIANT, "opt": "all"})},
        {"variant": ()},
        {"key": "0123456789abcdee"},
    ],
    ids=lambda c: next(iter(c)),
)
def test_spec_id_changes_with_every_identity_field(change):
    assert dataclasses.replace(FIXED, **change).spec_id != FIXED_SPEC_ID


def test_variant_is_canonical():
    assert canonical_variant({"b": 1, "a": "x"}) == (("a", "x"), ("b", 1))
    assert canonical_variant(None) == ()
    assert variant_id({"threads": 4, "opt": "all"}) == "opt=all,threads=4"
    assert variant_id(()) == ""


def test_unique_specs_keeps_first_payload_and_order():
    a = dataclasses.replace(FIXED, key="a" * 16, label="first a")
    a_again = dataclasses.replace(a, kind=SpecKind.GROUP, label="second a")
    b = dataclasses.replace(FIXED, key="b" * 16)
    out = unique_specs([b, a, a_again, b])
    assert [s.key for s in out] == ["b" * 16, "a" * 16]
    assert out[1].label == "first a"


# -- plans --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ort_runtime():
    return OnnxRuntimeCPU(threads=1)


@pytest.fixture(scope="module")
def chain(conv_chain, process_proto):
    return process_proto(conv_chain("reshape"))


def test_plan_uses_the_runtime_groups(chain, ort_runtime):
    plan = plan_model(chain, ort_runtime, (1, 2))
    assert [layer.op_type for layer in chain.graph.layers] == ["Conv", "BatchNormalization", "Relu", "Conv", "Reshape"]
    assert plan.units == ((0, 1, 2), (3,), (4,))
    assert plan.unit_keys == tuple(network_of(chain.graph, u)[0] for u in plan.units)
    # single-layer units are keyed by their layer key
    assert plan.unit_keys[1:] == (chain.graph.layers[3].layer_key, chain.graph.layers[4].layer_key)
    assert plan.batch_size == 1
    assert plan.shapes == {"x": (1, 3, 8, 8)}
    assert plan.model_key == model_key(chain.graph)


def test_sequences_are_made_of_whole_units_and_cover_every_layer_once(chain, ort_runtime):
    plan = plan_model(chain, ort_runtime, (1, 2, 3))
    assert set(plan.sequences) == {1, 2, 3}
    for g, seqs in plan.sequences.items():
        flat = [i for s in seqs for i in s]
        assert sorted(flat) == list(range(len(chain.graph.layers))), g
        for seq in seqs:
            inside = [u for u in plan.units if set(u) <= set(seq)]
            assert sum(len(u) for u in inside) == len(seq), f"G={g}: {seq} splits a unit"
            assert len(inside) <= g
        assert plan.sequence_keys[g] == tuple(network_of(chain.graph, s)[0] for s in seqs)
    assert plan.sequences[1] == plan.units
    assert plan.sequence_keys[1] == plan.unit_keys
    assert plan.sequences[2] == ((0, 1, 2, 3), (4,))


def test_plan_networks_hold_every_layer_unit_and_sequence(chain, ort_runtime):
    plan = plan_model(chain, ort_runtime, (2,))
    expected = set(chain.graph.layer_keys) | set(plan.unit_keys) | set(plan.sequence_keys[2])
    assert set(plan.networks) == expected | {plan.call_overhead_key}
    # 5 layers, the Conv+BN+Relu group, one 4-layer sequence, the call overhead's Relu of one float
    assert len(plan.networks) == 5 + 1 + 1 + 1


def test_plan_is_deterministic(chain, ort_runtime, conv_chain, process_proto):
    first = plan_model(chain, ort_runtime, (1, 2))
    renamed = plan_model(process_proto(conv_chain("reshape", prefix="other_")), ort_runtime, (1, 2))
    for plan in (plan_model(chain, ort_runtime, (2, 1, 2)), renamed):
        assert plan.units == first.units
        assert plan.unit_keys == first.unit_keys
        assert dict(plan.sequence_keys) == dict(first.sequence_keys)
        assert plan.model_key == first.model_key
        assert list(plan.networks) == list(first.networks)


def test_model_key_and_batch_follow_the_binding(conv_chain, process_proto):
    one = process_proto(conv_chain("reshape", batch=1))
    two = process_proto(conv_chain("reshape", batch=2))
    assert batch_size_of(two.graph) == 2
    assert model_key(one.graph) != model_key(two.graph)
    assert model_key(one.graph) != model_key(process_proto(conv_chain("maxpool")).graph)


def test_a_runtime_without_groups_plans_single_layers(chain):
    plan = plan_model(chain, NullRuntime(), (1,))
    assert plan.units == tuple((i,) for i in range(5))
    assert plan.unit_keys == tuple(chain.graph.layer_keys)
    assert set(plan.networks) == set(chain.graph.layer_keys) | {plan.call_overhead_key}


class _DisorderedGroups:
    """A runtime whose grouping does not respect the layer order (Conv with Relu, BN apart)."""

    name = "disordered"

    def execution_groups(self, graph, proto):
        return [[0, 2], [1], [3], [4]]


def test_groups_against_the_topological_order_fall_back_to_layers(chain):
    plan = plan_model(chain, _DisorderedGroups(), (1,))
    assert plan.units == tuple((i,) for i in range(5))
    assert plan.unit_keys == tuple(chain.graph.layer_keys)
    # the rejected group is not benchmarked
    assert set(plan.networks) == set(chain.graph.layer_keys) | {plan.call_overhead_key}


def test_specs_for_plan_kinds_and_payloads(chain, ort_runtime):
    plan = plan_model(chain, ort_runtime, (1, 2), batch=None)
    specs = specs_for_plan(plan, ort_runtime.name, ort_runtime.variant(), e2e=True)
    by_kind: dict[SpecKind, list[BenchmarkSpec]] = {}
    for s in specs:
        by_kind.setdefault(s.kind, []).append(s)
    assert {s.key for s in by_kind[SpecKind.LAYER]} == set(chain.graph.layer_keys) | {plan.call_overhead_key}
    assert [s.key for s in by_kind[SpecKind.GROUP]] == [plan.unit_keys[0]]
    assert by_kind[SpecKind.GROUP][0].label == "Conv+BatchNormalization+Relu 1x3x8x8"
    assert [s.key for s in by_kind[SpecKind.SEQUENCE]] == [plan.sequence_keys[2][0]]
    (model,) = by_kind[SpecKind.MODEL]
    assert model.key == plan.model_key
    # constant inputs: w1 4x3x3x3 + b1 4 + BN 4x4 + w2 4x4x1x1 float32, Reshape target 2 int64
    weights = (108 + 4 + 16 + 16) * 4 + 16
    # the memory guard's parts: the 1x3x8x8 input; at most two 1x4x8x8 activations alive at once
    # (none of its weights left in a data file, none in float16)
    memory = {
        "weight_bytes": weights,
        "file_weight_bytes": 0,
        "widened_weight_bytes": 0,
        "input_bytes": 3 * 8 * 8 * 4,
        "activation_bytes": 2 * 4 * 8 * 8 * 4,
    }
    # and what the cold-weights rule reads: the weights one run reads (no gathered table here: all of them)
    assert model.model == {"path": "mem.onnx", "batch": None, "shapes": {}, **memory, "read_weight_bytes": weights}
    assert model.network is None
    for s in specs:
        assert s.runtime == "onnxruntime"
        assert s.variant_id == "ep=cpu,opt=extended,threads=1"
        assert s.batch_size == 1
        assert s.dtype == "float32"
        if s.kind is not SpecKind.MODEL:
            assert s.network is plan.networks[s.key]
    assert len(unique_specs(specs)) == len(specs)
    assert len(specs_for_plan(plan, ort_runtime.name, ort_runtime.variant())) == len(specs) - 1


def test_a_models_specs_come_in_the_order_its_compositions_need_them_together(ort_runtime, zoo_model):
    """The model, its call overhead, its units, its sequences, then its layers alone: cut into
    chunks of 512 (``interleave_max_specs``), DenseNet-121's 575 keep every figure a composition
    compares in the first; before, its end to end (in the fleet) or its overhead was in the second."""
    from benanza.bench.execute import group_chunks

    plan = plan_model(zoo_model("densenet121"), ort_runtime, (1, 3))
    specs = specs_for_plan(plan, ort_runtime.name, ort_runtime.variant(), e2e=True)
    units, sequences = set(plan.unit_keys), {k for keys in plan.sequence_keys.values() for k in keys}
    roles = [
        "model"
        if s.kind is SpecKind.MODEL
        else "overhead"
        if s.key == plan.call_overhead_key
        else "unit"
        if s.key in units
        else "sequence"
        if s.key in sequences
        else "layer"
        for s in specs
    ]
    order = ["model", "overhead", "unit", "sequence", "layer"]
    assert roles == sorted(roles, key=order.index) and len(specs) > 512
    first, *rest = group_chunks(specs, budget=1 << 62, max_specs=512)
    assert {s.key for s in first} >= {plan.model_key, plan.call_overhead_key} | units | sequences
    assert {s.kind for chunk in rest for s in chunk} == {SpecKind.LAYER}


def test_specs_of_two_models_share_their_common_layers(chain, conv_chain, process_proto, ort_runtime):
    other = process_proto(conv_chain("maxpool"))
    specs_a = specs_for_plan(plan_model(chain, ort_runtime, (1, 2)), "onnxruntime", ort_runtime.variant())
    specs_b = specs_for_plan(plan_model(other, ort_runtime, (1, 2)), "onnxruntime", ort_runtime.variant())
    ids_a, ids_b = {s.spec_id for s in specs_a}, {s.spec_id for s in specs_b}
    shared = ids_a & ids_b
    # Conv, BN, Relu, the second Conv, the fused group, Conv+BN+Relu->Conv as a G=2 sequence; each
    # model's call overhead is its own, measured with its benchmarks
    assert len(shared) == 6
    overhead = [s for s in specs_a + specs_b if s.network is not None and s.network.nodes[0].op_type == "Relu"]
    assert len({s.spec_id for s in overhead if len(s.network.nodes) == 1 and s.network.inputs[0].shape == (1,)}) == 2
    assert len(unique_specs([*specs_a, *specs_b])) == len(ids_a | ids_b)


@pytest.mark.parametrize(
    ("key", "batch", "dtype", "runtime", "variant"),
    [
        ("0123456789abcdef", 1, "float32", "onnxruntime", "ep=cpu,opt=extended,threads=2"),
        ("k", 64, "float16", "cudnn", 'algo="é\\u00e9",math=tensor\\n'),
        ("", 0, "", "", ""),
    ],
)
def test_spec_id_of_equals_the_canonical_json_hash(key, batch, dtype, runtime, variant):
    from benanza.bench.spec import SPEC_VERSION, spec_id_of
    from benanza.model.keys import stable_id

    fields = {"key": key, "batch_size": batch, "dtype": dtype, "runtime": runtime, "variant": variant}
    assert spec_id_of(key, batch, dtype, runtime, variant) == stable_id(fields, version=SPEC_VERSION)


def test_a_plan_with_sequences_measures_the_call_overhead_at_the_models_opset(chain, ort_runtime, zoo_model):
    """One Relu of one float, built like the model's networks: with a sink at opset 17, none at the zoo's 9."""
    from benanza.bench.build import build_onnx

    plan = plan_model(chain, ort_runtime, (1,))
    overhead = plan.networks[plan.call_overhead_key]
    assert [(n.op_type, n.opset) for n in overhead.nodes] == [("Relu", 17)]
    assert [n.op_type for n in build_onnx(overhead, sink=True).graph.node] == ["Relu", "Slice"]
    old = plan_model(zoo_model("squeezenet"), ort_runtime, (1,))
    assert old.call_overhead_key != plan.call_overhead_key
    assert [n.op_type for n in build_onnx(old.networks[old.call_overhead_key], sink=True).graph.node] == ["Relu"]
    assert plan_model(chain, ort_runtime, ()).call_overhead_key == ""  # nothing composed, nothing to subtract
