"""ONNX's own operator conformance cases, processed as models: every output shaped, or why not.

``onnx.backend.test.case.node.collect_testcases`` gives 1,884 single-op models (and their
function expansions) with concrete inputs and expected outputs. Each case's inputs are bound
to the shapes of its test data. A case whose outputs follow from its input shapes and
constants must come out shaped exactly as its expected outputs; a case where a graph input's
*value* decides an output shape (a Reshape target, Resize scales, TopK's k, a NonZero count
fed at run time) must be reported with that reason, naming the input; nothing raises. Cases
with sequence inputs are refused in one line (benanza binds tensors).

``python -m pytest -q -s -m slow tests/test_onnx_conformance.py`` prints the counts (its tests are slow).
"""

from __future__ import annotations

import collections
import re
import warnings

import numpy as np
import onnx
import pytest

from benanza.errors import ModelError
from benanza.model.process import process_model
from benanza.model.request import BindingRequest

# Cases where a graph input's value decides an output shape, by name prefix, with the inputs
# that decide it (the reason must name at least one of them).
VALUE_DECIDES = {
    "affine_grid": {"size"},
    "blackmanwindow": {"x"},
    "hammingwindow": {"x"},
    "hannwindow": {"x"},
    "center_crop_pad": {"shape"},
    "col2im": {"image_shape", "block_shape"},
    "compress": {"condition"},
    "constant_pad": {"pads"},
    "edge_pad": {"pads"},
    "reflect_pad": {"pads"},
    "wrap_pad": {"pads"},
    "constantofshape": {"x"},
    "dft_irfft": {"axis"},
    "dft_rfft": {"axis"},
    "expand_dim": {"new_shape"},
    "image_decoder": {"data"},
    "loop11": {"trip_count"},
    "maxunpool_export_with_output_shape": {"output_shape"},
    "melweightmatrix": {"num_mel_bins", "dft_length", "sample_rate"},
    "nonmaxsuppression": {"max_output_boxes_per_class", "boxes", "scores"},
    "nonzero": {"condition"},
    "onehot": {"depth"},
    "range": {"start", "limit", "delta"},
    "reduce_": {"axes"},
    "reshape": {"shape"},
    "resize": {"scales", "sizes"},
    "slice": {"starts", "ends", "axes", "steps"},
    "split_variable_parts": {"split"},
    "split_zero_size_splits": {"split"},
    "squeeze": {"axes"},
    "stft": {"frame_step", "frame_length"},
    "string_split": {"x"},
    "strnormalizer": {"x"},
    "tile": {"y"},  # the repeats
    "top_k": {"k"},
    "unique": {"X"},
    "unsqueeze": {"axes"},
    "upsample_nearest": {"scales"},
}
# Cases under those prefixes whose outputs follow from shapes after all.
SHAPED_ANYWAY = re.compile(
    r"test_dft_i?rfft_opset19"  # the axis is an attribute from opset 19
    r"|test_reduce_\w+_default_axes\w*|test_reduce_log_sum_default\w*"  # no axes: every axis
    r"|test_reduce_sum_empty_axes_input_noop\w*"  # empty axes: an empty tensor has no value
    r"|test_string_split_empty_tensor"  # no strings to split
    r"|test_unique_length_1"  # one element has one unique value, whatever it is
)
DEPENDS = re.compile(r"depends on the value of runtime inputs? ((?:'[^']+'(?:, )?)+)")


def _shape(value) -> tuple[int, ...] | None:
    """The shape of a test datum that is a tensor (an array, a numpy scalar, a TensorProto); None otherwise."""
    if isinstance(value, np.ndarray | np.generic):
        return tuple(np.shape(value))
    if isinstance(value, onnx.TensorProto):
        return tuple(value.dims)
    return None


def expected_value_inputs(name: str) -> set[str] | None:
    if SHAPED_ANYWAY.fullmatch(name):
        return None
    for prefix, inputs in VALUE_DECIDES.items():
        if name.startswith(f"test_{prefix}"):
            return inputs
    return None


def classify(case) -> tuple[str, str]:
    """(outcome, detail): ``shaped``, ``value``, ``by data`` (a length its data decides, taken from the model's
    run on synthetic inputs: not the case's), ``unknown``, ``wrong``, ``refused`` (a ModelError) or ``raised``."""
    ins, outs = case.data_sets[0]
    model = case.model
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    shapes = {n: _shape(v) for n, v in zip(names, ins, strict=False) if _shape(v) is not None}
    try:
        processed = process_model(f"{case.name}.onnx", request=BindingRequest(shapes), proto=model, fits_here=False)
    except ModelError as exc:
        return "refused", str(exc)
    except Exception as exc:
        return "raised", repr(exc)
    types = {vi.name: vi for vi in (*processed.proto.graph.value_info, *processed.proto.graph.output)}
    got = []
    for out in processed.proto.graph.output:
        tt = types[out.name].type.tensor_type
        dims = tt.shape.dim if tt.HasField("shape") else None
        got.append(
            tuple(d.dim_value for d in dims)
            if dims is not None and all(d.HasField("dim_value") for d in dims)
            else None
        )
    by_data = dict(processed.shapes.by_data)
    if any(o.name in by_data for o in processed.proto.graph.output):  # a length the data decides, as run
        return "by data", next(by_data[o.name] for o in processed.proto.graph.output if o.name in by_data)
    if all(g is not None for g in got):
        expected = [_shape(v) for v in outs]
        return ("shaped", "") if got == expected else ("wrong", f"{got} != {expected}")
    reasons = [processed.shapes.reason(o.name) or "" for o in processed.proto.graph.output]
    reasons += [u.reason for u in processed.graph.unsupported]
    for reason in reasons:
        if DEPENDS.search(reason):
            return "value", reason
    return "unknown", "; ".join(r for r in reasons if r)


@pytest.fixture(scope="module")
def outcomes():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators warn about their own arithmetic
        cases = collect_testcases()
    results = {}
    for case in cases:
        ins, outs = case.data_sets[0]
        values = [*ins, *outs]
        kind = "ndarray" if all(isinstance(v, np.ndarray) for v in values) else "tensor"
        if any(_shape(v) is None for v in values):
            kind = "sequence"
        results[case.name] = (kind, *classify(case))
    return results


@pytest.mark.slow
def test_every_case_is_shaped_or_says_which_value_decides(outcomes):
    counts = collections.Counter((kind, outcome) for kind, outcome, _ in outcomes.values())
    arrays = {o: n for (k, o), n in counts.items() if k == "ndarray"}
    print(
        f"\nONNX node conformance: {len(outcomes)} cases; {sum(arrays.values())} with array data (the issue's "
        f"tensor cases): {arrays}; all tensor-valued: {dict(counts)}"
    )
    problems = {
        name: (outcome, detail)
        for name, (kind, outcome, detail) in outcomes.items()
        if outcome == "raised" or (kind != "sequence" and outcome in ("wrong", "unknown", "refused"))
    }
    assert problems == {}
    assert len(outcomes) >= 1884 and counts["ndarray", "shaped"] >= 1237


@pytest.mark.slow
def test_value_decided_cases_are_exactly_those_and_name_the_input(outcomes):
    tensors = {name for name, (kind, _, _) in outcomes.items() if kind != "sequence"}
    reported = {name for name in tensors if outcomes[name][1] in ("value", "by data")}
    expected = {name for name in tensors if expected_value_inputs(name) is not None}
    assert sorted(reported - expected) == [] and sorted(expected - reported) == []
    for name in reported:
        named = set(re.findall(r"'([^']+)'", DEPENDS.search(outcomes[name][2]).group(1)))
        assert named & expected_value_inputs(name), (name, outcomes[name][2])


@pytest.mark.slow
def test_sequence_inputs_are_refused_in_one_line(outcomes):
    """Sequences and empty optionals are not tensors: a case with one as input is refused, one line."""
    refused = [detail for kind, outcome, detail in outcomes.values() if kind == "sequence" and outcome == "refused"]
    assert len(refused) >= 20 and all("\n" not in d and "is not a tensor" in d for d in refused)


def _subgraph_cases():
    """The conformance cases with a node that holds subgraphs (If, Loop, Scan, ...) and only tensor data."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    for case in cases:
        if not any(_has_subgraph(n) for n in case.model.graph.node):
            continue
        ins, outs = case.data_sets[0]
        if all(_shape(v) is not None for v in [*ins, *outs]):
            yield case


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


@pytest.mark.slow
def test_control_flow_cases_run_as_one_layer_or_say_why():
    """Each subgraph node is one layer whose one-layer model passes the checker and runs in ONNX
    Runtime with its outputs' shapes, or is reported with its reason; a single-node case whose
    layer has no synthesised weight computes the case's expected outputs from its inputs."""
    import onnxruntime as ort

    from benanza.bench.build import build_onnx
    from benanza.model.graph import InputKind
    from benanza.model.network import network_of
    from benanza.model.steering import steering_inputs
    from benanza.model.subgraphs import synthetic_inputs

    ran, reproduced, reported, refused_by_ort, steered = set(), set(), {}, {}, set()
    for case in _subgraph_cases():
        ins, outs = case.data_sets[0]
        inits = {i.name for i in case.model.graph.initializer}
        names = [i.name for i in case.model.graph.input if i.name not in inits]
        data = dict(zip(names, ins, strict=False))
        shapes = {n: _shape(v) for n, v in data.items()}
        # an If on an input is folded to the branch of the case's value of it (``model.steering``)
        values = {n: int(np.asarray(data[n]).ravel()[0]) for n in steering_inputs(case.model, shapes)}
        processed = process_model(
            f"{case.name}.onnx", request=BindingRequest(shapes, values=values), proto=case.model, fits_here=False
        )
        if values and not any(n.op_type == "If" for n in processed.proto.graph.node):
            session = ort.InferenceSession(processed.proto.SerializeToString(), providers=["CPUExecutionProvider"])
            fed = {i.name: np.asarray(data[i.name]) for i in session.get_inputs()}
            for value, expected in zip(session.run(None, fed), outs, strict=True):
                np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6, err_msg=case.name)
            steered.add(case.name)
        for node in processed.graph.unsupported:
            if node.op_type in ("If", "Loop", "Scan"):
                reported[case.name] = node.reason
        for layer in processed.graph.layers:
            if not layer.subgraphs:
                continue
            model = build_onnx(network_of(processed.graph, [layer.index])[1])
            onnx.checker.check_model(model, full_check=True)
            try:
                session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            except Exception as exc:  # stored as a failed benchmark with this reason
                refused_by_ort[case.name] = str(exc)
                continue
            got = session.run(None, synthetic_inputs(model))
            assert [list(o.shape) for o in got] == layer.output_shapes, case.name
            ran.add(case.name)
            if len(processed.graph.layers) == 1 and all(i.kind is not InputKind.WEIGHT for i in layer.inputs):
                fed = list(dict.fromkeys(i.tensor.name for i in layer.inputs if i.kind is InputKind.ACTIVATION))
                got = session.run(None, {f"in{k}": np.asarray(data[name]) for k, name in enumerate(fed)})
                for value, expected in zip(got, outs, strict=True):
                    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6, err_msg=case.name)
                reproduced.add(case.name)
    print(f"\ncontrol flow: {len(ran)} ran ({len(reproduced)} reproduced), {len(reported)} reported, {steered=}")
    assert {"test_scan_sum", "test_scan9_sum", "test_scan9_multi_state", "test_scan9_scalar"} <= reproduced
    assert "test_if" in steered  # its branch, chosen by the case's cond, computes the case's outputs
    assert sum(name.startswith("test_linear_attention") for name in ran) >= 10  # their Scan, expanded
    # a Loop run for a runtime trip count: its iterations, and cost, are unknown until run
    assert "trip count M 'trip_count' is a runtime value" in reported["test_loop11"]
    assert all(reason for reason in reported.values())
    # FlexAttention (ai.onnx.preview) holds subgraphs too; this ONNX Runtime does not implement it
    assert all(n.startswith("test_flexattention") and "not a registered" in e for n, e in refused_by_ort.items())
