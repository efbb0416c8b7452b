"""Control flow (``If``, ``Loop``, ``Scan``) benchmarked as one layer with its subgraphs.

The model: ``x -> Relu -> h``; ``If(h > 0)`` whose branches read ``h`` and a weight ``w``
from the outer scope; a ``Loop`` of 4 iterations carrying the If's output, its body holding a
nested ``If`` on the iteration's parity that reads ``h`` two scopes up; a ``Scan`` over the
Loop's stacked outputs whose body reads a scale from the outer scope.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_checks import FAST_ENV, fast_flags
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from benanza.bench.build import build_onnx, is_sink
from benanza.bench.generate import model_key, plan_model
from benanza.cli import app
from benanza.model.control_flow import decode_subgraph
from benanza.model.graph import InputKind, Layer, ModelGraph
from benanza.model.load import has_data
from benanza.model.network import Network, network_of
from benanza.model.subgraphs import find_model_subgraphs, sequence_model, synthetic_inputs
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU, feeds_for, profile_kernel_times, session_options

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
WIDTH = 96  # above the value limit: the captured weight ``w`` is synthesised, not carried
SYSTEM = "control-flow-test"
FAST_FLAGS = fast_flags(SYSTEM)
ANALYZE_FLAGS = ["--threads", "1", "--system", SYSTEM]
CONTROL_FLOW = ("If", "Loop", "Scan")


def _vi(name: str, elem: int, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def control_flow_model(
    p: str = "", branch_op: str = "Add", trip: int = 4, scale: float = 0.5, seed: int = 0
) -> onnx.ModelProto:
    """The module's model; ``p`` prefixes every name (node, tensor, graph) to rename it all."""

    def branch(op: str, name: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(op, [f"{p}h", f"{p}w"], [f"{p}{name}_y"])],
            f"{p}{name}",
            [],
            [_vi(f"{p}{name}_y", F, [1, WIDTH])],
        )

    parity_then = helper.make_graph(
        [helper.make_node("Add", [f"{p}acc_in", f"{p}h"], [f"{p}pt"])], f"{p}pthen", [], [_vi(f"{p}pt", F, [1, WIDTH])]
    )
    parity_else = helper.make_graph(
        [helper.make_node("Sub", [f"{p}acc_in", f"{p}h"], [f"{p}pe"])], f"{p}pelse", [], [_vi(f"{p}pe", F, [1, WIDTH])]
    )
    two = numpy_helper.from_array(np.array(2, np.int64), f"{p}two_v")
    zero = numpy_helper.from_array(np.array(0, np.int64), f"{p}zero_v")
    loop_body = helper.make_graph(
        [
            helper.make_node("Constant", [], [f"{p}two"], value=two),
            helper.make_node("Mod", [f"{p}i", f"{p}two"], [f"{p}par"]),
            helper.make_node("Constant", [], [f"{p}zero"], value=zero),
            helper.make_node("Equal", [f"{p}par", f"{p}zero"], [f"{p}even"]),
            helper.make_node(
                "If", [f"{p}even"], [f"{p}acc_out"], then_branch=parity_then, else_branch=parity_else, name=f"{p}par_if"
            ),
            helper.make_node("Identity", [f"{p}cond_in"], [f"{p}cond_out"]),
            helper.make_node("Identity", [f"{p}acc_out"], [f"{p}step"]),
        ],
        f"{p}body",
        [_vi(f"{p}i", I64, []), _vi(f"{p}cond_in", BOOL, []), _vi(f"{p}acc_in", F, [1, WIDTH])],
        [_vi(f"{p}cond_out", BOOL, []), _vi(f"{p}acc_out", F, [1, WIDTH]), _vi(f"{p}step", F, [1, WIDTH])],
    )
    scan_body = helper.make_graph(
        [
            helper.make_node("Add", [f"{p}s_in", f"{p}x_t"], [f"{p}s_out"]),
            helper.make_node("Mul", [f"{p}s_out", f"{p}scale"], [f"{p}y_t"]),
        ],
        f"{p}scan_body",
        [_vi(f"{p}s_in", F, [WIDTH]), _vi(f"{p}x_t", F, [WIDTH])],
        [_vi(f"{p}s_out", F, [WIDTH]), _vi(f"{p}y_t", F, [WIDTH])],
    )
    nodes = [
        helper.make_node("Relu", [f"{p}x"], [f"{p}h"], name=f"{p}relu"),
        helper.make_node("ReduceSum", [f"{p}h"], [f"{p}total"], keepdims=0, name=f"{p}sum"),
        helper.make_node("Greater", [f"{p}total", f"{p}zero_f"], [f"{p}c"], name=f"{p}positive"),
        helper.make_node(
            "If",
            [f"{p}c"],
            [f"{p}y_if"],
            then_branch=branch(branch_op, "then"),
            else_branch=branch("Mul", "else"),
            name=f"{p}if",
        ),
        helper.make_node(
            "Loop", [f"{p}trip", f"{p}go", f"{p}y_if"], [f"{p}acc", f"{p}steps"], body=loop_body, name=f"{p}loop"
        ),
        helper.make_node("Reshape", [f"{p}steps", f"{p}shape"], [f"{p}seq"], name=f"{p}reshape"),
        helper.make_node(
            "Scan", [f"{p}s0", f"{p}seq"], [f"{p}s_final", f"{p}ys"], body=scan_body, num_scan_inputs=1, name=f"{p}scan"
        ),
    ]
    rng = np.random.default_rng(seed)
    inits = {
        "zero_f": np.array(0, np.float32),
        "trip": np.array(trip, np.int64),
        "go": np.array(True),
        "w": rng.standard_normal((1, WIDTH)).astype(np.float32),
        "shape": np.array([trip, WIDTH], np.int64),
        "s0": np.zeros(WIDTH, np.float32),
        "scale": np.array(scale, np.float32),
    }
    graph = helper.make_graph(
        nodes,
        f"{p}control_flow",
        [_vi(f"{p}x", F, [1, WIDTH])],
        [_vi(f"{p}acc", F, [1, WIDTH]), _vi(f"{p}s_final", F, [WIDTH]), _vi(f"{p}ys", F, [trip, WIDTH])],
        [numpy_helper.from_array(v, f"{p}{k}") for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _by_name(graph: ModelGraph, prefix: str = "") -> dict[str, Layer]:
    return {layer.name.removeprefix(prefix): layer for layer in graph.layers}


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(
        model.SerializeToString(), session_options("extended", 1), providers=["CPUExecutionProvider"]
    )


def _invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args], env=FAST_ENV)


@pytest.fixture(scope="module")
def processed(process_proto):
    return process_proto(control_flow_model())


def test_each_control_flow_node_is_one_layer_that_reads_what_its_subgraphs_capture(processed):
    graph = processed.graph
    assert graph.unsupported == ()
    layers = _by_name(graph)
    assert [layer.op_type for layer in graph.layers] == [
        "Relu",
        "ReduceSum",
        "Greater",
        "If",
        "Loop",
        "Reshape",
        "Scan",
    ]

    branch = layers["if"]  # the runtime condition; then h and w, which both branches read
    assert [(i.tensor.name, i.kind) for i in branch.inputs] == [
        ("c", InputKind.ACTIVATION),
        ("h", InputKind.ACTIVATION),
        ("w", InputKind.WEIGHT),  # 96 elements: a weight, synthesised in the benchmark
    ]
    assert branch.captured == 2 and branch.output_shapes == [[1, WIDTH]]

    loop = layers["loop"]  # M and cond by value; h captured by the If nested in the body
    assert [(i.tensor.name, i.kind, i.value) for i in loop.inputs] == [
        ("trip", InputKind.VALUE, (4,)),
        ("go", InputKind.VALUE, (True,)),
        ("y_if", InputKind.ACTIVATION, None),
        ("h", InputKind.ACTIVATION, None),
    ]
    assert loop.output_shapes == [[1, WIDTH], [4, 1, WIDTH]]  # the scan output by running the Loop

    scan = layers["scan"]
    assert scan.inputs[-1].tensor.name == "scale" and scan.inputs[-1].kind is InputKind.VALUE
    assert scan.output_shapes == [[WIDTH], [4, WIDTH]]
    # the outer tensors the subgraphs read are data dependencies
    index = {name: layer.index for name, layer in layers.items()}
    assert (index["relu"], index["if"]) in graph.edges and (index["relu"], index["loop"]) in graph.edges


def test_keys_ignore_names_and_weight_values_but_follow_bodies_and_settings(processed, process_proto):
    keys = {name: layer.layer_key for name, layer in _by_name(processed.graph).items()}
    renamed = process_proto(control_flow_model(p="other_", seed=1)).graph  # every name, and w's values
    assert {name: layer.layer_key for name, layer in _by_name(renamed, "other_").items()} == keys

    mul = {n: lay.layer_key for n, lay in _by_name(process_proto(control_flow_model(branch_op="Mul")).graph).items()}
    assert mul["if"] != keys["if"]  # a different then branch
    assert {n: k for n, k in mul.items() if n != "if"} == {n: k for n, k in keys.items() if n != "if"}

    trip = _by_name(process_proto(control_flow_model(trip=5)).graph)
    assert trip["loop"].layer_key != keys["loop"]  # the trip count is a value
    scale = _by_name(process_proto(control_flow_model(scale=2.0)).graph)
    assert scale["scan"].layer_key != keys["scan"]  # a captured small constant is a value


def test_the_model_identity_says_which_outer_tensor_a_subgraph_reads(build_model, process_proto):
    """Same layers, same keys: only the tensor the branches capture differs, and so does the model. (The
    condition is the data's: one an input decides is folded to the branch it is fed, ``model.steering``.)"""

    def model(captured: str) -> onnx.ModelProto:
        branch = helper.make_graph([helper.make_node("Neg", [captured], ["o"])], "b", [], [_vi("o", F, [1, 4])])
        return build_model(
            [
                helper.make_node("Relu", ["x"], ["h"], name="relu"),
                helper.make_node("Sigmoid", ["x"], ["g"], name="sigmoid"),
                helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0, name="peak"),
                helper.make_node("ReduceMin", ["x"], ["floor"], keepdims=0, name="floor"),
                helper.make_node("Greater", ["peak", "floor"], ["c"], name="spread"),
                helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch, name="if"),
                helper.make_node("Add", ["h", "g"], ["z"], name="add"),
            ],
            [("x", F, [1, 4])],
            [("y", F, [1, 4]), ("z", F, [1, 4])],
        )

    reads_h, reads_g = process_proto(model("h")).graph, process_proto(model("g")).graph
    assert "If" in {layer.op_type for layer in reads_h.layers}
    assert reads_h.layer_keys == reads_g.layer_keys
    assert model_key(reads_h) != model_key(reads_g)


def test_the_one_layer_model_of_each_control_flow_layer_is_valid_and_runs(processed):
    for layer in processed.graph.layers:
        if layer.op_type not in CONTROL_FLOW:
            continue
        _, network = network_of(processed.graph, [layer.index])
        assert network.nodes[0].captured == layer.captured and network.nodes[0].subgraphs == layer.subgraphs
        assert Network.from_doc(json.loads(json.dumps(network.to_doc()))) == network  # subgraphs travel as text
        model = build_onnx(network)
        onnx.checker.check_model(model, full_check=True)
        node = model.graph.node[0]
        assert node.op_type == layer.op_type and len(node.input) == len(layer.node_inputs)
        assert {a.name for a in node.attribute if a.type == onnx.AttributeProto.GRAPH} == dict(layer.subgraphs).keys()
        outputs = _session(model).run(None, synthetic_inputs(model))
        assert [list(o.shape) for o in outputs] == layer.output_shapes, layer.name


def test_the_units_keep_each_control_flow_node_alone_and_its_sequences_run(processed):
    plan = plan_model(processed, OnnxRuntimeCPU(threads=1), (1, 3))
    assert plan.notes == ()  # ONNX Runtime built the optimized graph
    layers = _by_name(processed.graph)
    for name in ("if", "loop", "scan"):
        assert (layers[name].index,) in plan.units, (name, plan.units)
    for seq in find_model_subgraphs(processed.graph, 3):
        model = sequence_model(processed, seq)
        onnx.checker.check_model(model)
        _session(model).run(None, synthetic_inputs(model))


def test_a_loop_whose_iterations_are_not_fixed_is_reported_with_the_reason(build_model, process_proto):
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["v_in", "x"], ["v_out"]),
            helper.make_node("Identity", ["v_out"], ["row"]),  # a scan output: one row per iteration
        ],
        "body",
        [_vi("i", I64, []), _vi("cond_in", BOOL, []), _vi("v_in", F, [1, 4])],
        [_vi("cond_out", BOOL, []), _vi("v_out", F, [1, 4]), _vi("row", F, [1, 4])],
    )

    def loop(trip_input: bool, trip: int = 3):
        return build_model(
            [helper.make_node("Loop", ["m", "", "x"], ["v", "rows"], body=body, name="loop")],
            [("x", F, [1, 4]), *([("m", I64, [])] if trip_input else [])],
            [("v", F, [1, 4]), ("rows", F, None)],
            {} if trip_input else {"m": np.array(trip, np.int64)},
        )

    runtime = process_proto(loop(trip_input=True)).graph
    (node,) = runtime.unsupported
    assert node.node == "loop" and "'m'" in node.reason and "runtime value" in node.reason

    unbounded = process_proto(loop(trip_input=False, trip=2**63 - 1)).graph
    (node,) = unbounded.unsupported
    assert "no limit" in node.reason and "the body's condition decides" in node.reason

    fixed = process_proto(loop(trip_input=False, trip=3)).graph
    assert fixed.unsupported == () and fixed.layers[0].output_shapes == [[1, 4], [3, 1, 4]]


def test_a_loop_whose_body_computes_its_condition_from_data_is_reported(build_model, process_proto):
    """An early exit (``cond_out = Less(sum(acc), 20)``): synthetic data would decide the iterations.

    A condition on the iteration number alone (``i < 3``) runs the same iterations whatever the data."""

    def model(condition: list[onnx.NodeProto], limit: np.ndarray) -> onnx.ModelProto:
        body = helper.make_graph(
            [helper.make_node("Add", ["acc_in", "r"], ["acc_out"]), *condition],
            "body",
            [_vi("i", I64, []), _vi("cond_in", BOOL, []), _vi("acc_in", F, [2, 4])],
            [_vi("cond_out", BOOL, []), _vi("acc_out", F, [2, 4])],
            [numpy_helper.from_array(limit, "lim")],
        )
        return build_model(
            [
                helper.make_node("Relu", ["x"], ["r"], name="relu"),
                helper.make_node("Loop", ["m", "", "r"], ["y"], body=body, name="loop"),
            ],
            [("x", F, [2, 4])],
            [("y", F, [2, 4])],
            {"m": np.array(100, np.int64)},
        )

    early_exit = [
        helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
        helper.make_node("Less", ["s", "lim"], ["cond_out"]),
    ]
    (node,) = process_proto(model(early_exit, np.float32(20))).graph.unsupported
    assert node.node == "loop" and "early exit" in node.reason and "how many of its 100 run" in node.reason

    counted = process_proto(model([helper.make_node("Less", ["i", "lim"], ["cond_out"])], np.int64(3))).graph
    assert counted.unsupported == () and [layer.op_type for layer in counted.layers] == ["Relu", "Loop"]


def tf_while_loop(build_model, counter_start: str, trip: str = "m", read: str = "totals") -> onnx.ModelProto:
    """A TensorFlow ``while_loop`` as tf2onnx exports it (``tf.map_fn`` over a batch of 2): the loop carries its
    own counter, from ``counter_start``, and a limit passed through; ``cond = counter + 1 < limit``; each
    iteration gathers a row and writes its sum as a scan output. The counter and the limit are never read."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["k_in", "one"], ["k_out"]),
            helper.make_node("Gather", ["x", "k_in"], ["row"], axis=0),
            helper.make_node("ReduceSum", ["row", "axes"], ["total"], keepdims=0),
            helper.make_node("Less", ["k_out", "limit_in"], ["cond_out"]),
            helper.make_node("Identity", ["limit_in"], ["limit_out"]),
        ],
        "body",
        [_vi("i", I64, []), _vi("cond_in", BOOL, []), _vi("k_in", I64, []), _vi("limit_in", I64, [])],
        [_vi("cond_out", BOOL, []), _vi("k_out", I64, []), _vi("limit_out", I64, []), _vi("total", F, [])],
        [
            numpy_helper.from_array(np.array(1, np.int64), "one"),
            numpy_helper.from_array(np.array([0], np.int64), "axes"),
        ],
    )
    return build_model(
        [
            helper.make_node("Relu", ["data"], ["x"], name="relu"),
            helper.make_node(
                "Loop", [trip, "go", counter_start, "n"], ["k_final", "n_final", "totals"], body=body, name="map_fn"
            ),
            helper.make_node("Neg", [read], ["y"], name="neg"),
        ],
        [("data", F, [2, 8]), ("start", I64, [])],
        [("y", F if read == "totals" else I64, None)],
        {"m": np.array(2, np.int64), "go": np.array(True), "zero": np.array(0, np.int64), "n": np.array(2, np.int64)},
    )


def test_a_tensorflow_while_loop_that_counts_is_one_layer_and_its_unit_runs(build_model, process_proto, tmp_path):
    """tf2onnx exports every TensorFlow while loop so: before, "Loop's body computes its condition from data (an
    early exit)", as if its counter were data; and once a layer, its unit left the unread counter and limit
    unnamed, which crashed ONNX Runtime (a segmentation fault: the process gone, the whole run with it)."""
    import subprocess
    import sys

    graph = process_proto(tf_while_loop(build_model, "zero")).graph
    assert graph.unsupported == () and [layer.op_type for layer in graph.layers] == ["Relu", "Loop", "Neg"]
    _, network = network_of(graph, [1])
    path = tmp_path / "unit.onnx"
    onnx.save(build_onnx(network, sink=True), path)
    run = (
        "import onnx, onnxruntime as ort; from benanza.runtimes.onnxruntime import feeds_for;"
        f"m = onnx.load({str(path)!r});"
        "s = ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider']);"
        "print([o.shape for o in s.run(None, feeds_for(m))])"
    )
    done = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-500:])
    assert done.stdout.strip() == "[(1,)]"
    # its final counter read, its scan output not: a unit with fewer outputs than its body, refused by ORT
    # ("output index 1 is out of range; node has 1 outputs")
    graph = process_proto(tf_while_loop(build_model, "zero", read="k_final")).graph
    _, network = network_of(graph, [1])
    session = ort.InferenceSession(
        build_onnx(network, sink=True).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    assert session.run(None, feeds_for(build_onnx(network, sink=True)))[0].shape == ()
    # a counter that starts from data is an early exit on the data, as before
    # a tf.while_loop without maximum_iterations has no trip count M at all: its counter's chain, followed alone,
    # gives its iterations (2), and it is a layer; its condition passed through never turns false: reported
    counted = process_proto(tf_while_loop(build_model, "zero", trip="")).graph
    assert counted.unsupported == () and counted.layers[1].outputs[0].shape == (2,)
    endless = tf_while_loop(build_model, "zero", trip="")
    body = next(a.g for a in endless.graph.node[1].attribute if a.name == "body")
    body.node[3].CopyFrom(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    (tripless, _) = process_proto(endless).graph.unsupported
    assert "Loop without a trip count M" in tripless.reason
    unsupported = process_proto(tf_while_loop(build_model, "start"), None, {"start": ()}).graph.unsupported
    assert [u.node for u in unsupported] == ["map_fn", "neg"]  # the iterations, so its output's length
    assert "early exit" in unsupported[0].reason


def test_a_body_with_weights_and_a_nested_loop_is_carried_without_its_weights(build_model, process_proto):
    """The body's 16x16 weight travels as shape and dtype (its 1x16 constant by value); the nested Loop reads
    a tensor two scopes up; the one-layer model still validates and runs."""
    rng = np.random.default_rng(0)
    inner = helper.make_graph(
        [helper.make_node("Add", ["a_in", "h"], ["a_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "inner",
        [_vi("j", I64, []), _vi("c_in", BOOL, []), _vi("a_in", F, [2, 16])],
        [_vi("c_out", BOOL, []), _vi("a_out", F, [2, 16])],
    )
    bias = numpy_helper.from_array(rng.standard_normal((1, 16)).astype(np.float32), "bias_v")
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["acc_in", "w"], ["mm"]),
            helper.make_node("Constant", [], ["bias"], value=bias),
            helper.make_node("Add", ["mm", "bias"], ["mm2"]),
            helper.make_node("Loop", ["two", "", "mm2"], ["acc_out"], body=inner),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [_vi("i", I64, []), _vi("cond_in", BOOL, []), _vi("acc_in", F, [2, 16])],
        [_vi("cond_out", BOOL, []), _vi("acc_out", F, [2, 16])],
        [
            numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w"),
            numpy_helper.from_array(np.array(2, np.int64), "two"),
        ],
    )
    model = build_model(
        [
            helper.make_node("Relu", ["x"], ["h"], name="relu"),
            helper.make_node("Loop", ["m", "", "h"], ["y"], body=body, name="loop"),
        ],
        [("x", F, [2, 16])],
        [("y", F, [2, 16])],
        {"m": np.array(3, np.int64)},
    )
    graph = process_proto(model).graph
    assert graph.unsupported == ()
    loop = _by_name(graph)["loop"]
    _, network = network_of(graph, [loop.index])
    carried = decode_subgraph(dict(network.nodes[0].subgraphs)["body"], ["bound"])
    assert [(list(t.dims), has_data(t)) for t in carried.initializer] == [([16, 16], False), ([], True)]
    built = build_onnx(network)
    onnx.checker.check_model(built, full_check=True)
    outputs = _session(built).run(None, synthetic_inputs(built))
    assert [list(o.shape) for o in outputs] == loop.output_shapes == [[2, 16]]


def test_profiled_kernel_time_counts_subgraph_nodes_once(processed, tmp_path):
    """ORT profiles a Loop's body nodes inside the Loop's own event: summing both would double it.

    Checked on ORT's own events of the Loop run alone (its spans as profiled, no floor taken out): each run's kernel
    time is every node's span less the Loop's. (It compared kernel times less a floor measured once per process
    with the run's: on a busy machine the floor zeroed the tiny spans, and the test failed without a double count.)
    """
    loop = _by_name(processed.graph)["loop"]
    model = build_onnx(network_of(processed.graph, [loop.index])[1])
    options = session_options(OnnxRuntimeCPU(threads=1).opt_level, 1, profile=True)
    options.profile_file_prefix = str(tmp_path / "loop")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    for _ in range(3):
        session.run(None, synthetic_inputs(model))
    events = json.loads(Path(session.end_profiling()).read_text())
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")
    nodes = [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]

    def holds(e: dict, f: dict) -> bool:
        return e is not f and e["ts"] <= f["ts"] and f["ts"] + f["dur"] <= e["ts"] + e["dur"]

    expected = []
    for start, end in runs:
        inside = [e for e in nodes if start <= e["ts"] <= end and not is_sink(e["name"])]
        leaves = [e for e in inside if not any(holds(e, f) for f in inside)]
        held = {(e.get("args") or {}).get("op_name") for e in inside if e not in leaves}
        assert held == {"Loop", "If"} and len(leaves) > 8  # the Loop, the Ifs of its body and their nodes
        expected.append(sum(e["dur"] for e in leaves) * 1e-6)
    assert profile_kernel_times(events).kernel == pytest.approx(expected)


@pytest.mark.slow
def test_bench_run_measures_control_flow_and_the_bound_covers_the_model(tmp_path):
    path = tmp_path / "control_flow.onnx"
    onnx.save(control_flow_model(), path)
    uri = f"sqlite:///{tmp_path / 'cf.db'}"
    bench = _invoke("bench", "run", path, "--db", uri, "--granularity", "1,3", "--format", "json", *FAST_FLAGS)
    assert bench.exit_code == 0, bench.output
    summary = json.loads(bench.stdout)
    assert summary["failed"] == 0 and summary["measured"] >= 7 and summary["not_benchmarked"] == []

    bound = _invoke(
        "analyze", "lower-bound", path, "--db", uri, "--granularity", "1,3", "--format", "json", *ANALYZE_FLAGS
    )
    assert bound.exit_code == 0, bound.output
    (row,) = json.loads(bound.stdout)
    assert row["coverage"] == 1.0 and row["missing"] == []
    assert row["sequential_ms"] > 0 and row["parallel_ms"] > 0 and row["composed_ms"]["3"] > 0


@pytest.mark.slow
def test_a_control_flow_layer_the_runtime_cannot_run_is_stored_failed_and_missing(tmp_path, build_model):
    """A branch holding an op ONNX Runtime does not know: the If is a layer, its benchmark fails. (Its condition
    is computed from the data: one an input decides is folded to the branch it is fed, ``model.steering``.)"""
    then = helper.make_graph(
        [helper.make_node("Frob", ["h"], ["t"], domain="com.example")], "then", [], [_vi("t", F, [1, 8])]
    )
    other = helper.make_graph([helper.make_node("Neg", ["h"], ["e"])], "else", [], [_vi("e", F, [1, 8])])
    model = build_model(
        [
            helper.make_node("Relu", ["x"], ["h"], name="relu"),
            helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0, name="peak"),
            helper.make_node("ReduceMin", ["x"], ["floor"], keepdims=0, name="floor"),
            helper.make_node("Greater", ["peak", "floor"], ["c"], name="spread"),
            helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branchy"),
        ],
        [("x", F, [1, 8])],
        [("y", F, [1, 8])],
        extra_opsets={"com.example": 1},
        check=False,
    )
    path = tmp_path / "frob_branch.onnx"
    onnx.save(model, path)
    uri = f"sqlite:///{tmp_path / 'fail.db'}"
    bench = _invoke("bench", "run", path, "--db", uri, "--granularity", "1", "--format", "json", *FAST_FLAGS)
    assert bench.exit_code == 0, bench.output
    summary = json.loads(bench.stdout)
    assert summary["failed"] == 1 and summary["not_benchmarked"] == []

    bound = _invoke(
        "analyze", "lower-bound", path, "--db", uri, "--granularity", "1", "--format", "json", *ANALYZE_FLAGS
    )
    (row,) = json.loads(bound.stdout)
    assert row["coverage"] == 4 / 5 and row["sequential_ms"] is None  # relu, peak, floor, spread measured
    (missing,) = row["missing"]
    assert missing["name"] == "branchy" and missing["reason"].startswith("failed:")
    assert "com.example:Frob" in missing["reason"]
