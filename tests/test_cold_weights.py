"""Layers that stream their weights, timed with them out of the host's caches (``benanza.bench.cold_weights``)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from onnx import TensorProto, helper

from benanza.bench import host_cache
from benanza.bench.cold_weights import (
    STREAMED_MIN_BYTES,
    evicted_bytes,
    streamed_weight_bytes,
    streams_weights,
    weights_read_per_run,
)
from benanza.bench.execute import COLD_WEIGHTS, model_weight_bytes, run_interleaved, run_spec
from benanza.bench.generate import plan_model, plan_model_file, specs_for_plan
from benanza.bench.harness import HarnessSettings, Timing, measure, measure_interleaved
from benanza.bench.memory import weight_bytes
from benanza.bench.records import Outcome
from benanza.bench.spec import SpecKind
from benanza.model.network import RefKind, network_of
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU

F, H = TensorProto.FLOAT, TensorProto.FLOAT16


@pytest.fixture(scope="module")
def layers(build_model, process_proto) -> Callable[..., object]:
    """``layers(nodes, inputs, arrays)``: the one-layer networks of a model, by node output name."""

    def build(nodes, inputs, arrays, opset=17):
        outs = [n.output[0] for n in nodes]
        graph = process_proto(build_model(nodes, inputs, [(o, F, None) for o in outs[-1:]], arrays, opset=opset)).graph
        return {layer.outputs[0].name: network_of(graph, [layer.index])[1] for layer in graph.layers}

    return build


def _weights(*shape: int, dtype=np.float32) -> np.ndarray:
    return np.zeros(shape, dtype)


def test_a_layer_that_uses_each_weight_a_few_times_streams_them(layers) -> None:
    nets = layers(
        [
            helper.make_node("Gemm", ["x", "w"], ["fc"], transB=1),  # 1 row: 1 multiply-add per weight
            helper.make_node("Relu", ["fc"], ["r"]),
        ],
        [("x", F, [1, 4096])],
        {"w": _weights(1000, 4096)},
    )
    assert streamed_weight_bytes(nets["fc"]) == 1000 * 4096 * 4
    assert streamed_weight_bytes(nets["r"]) == 0  # no weights


@pytest.mark.parametrize(("rows", "streams"), [(1, True), (8, True), (9, False), (64, False)])
def test_the_rows_of_a_product_decide_whether_it_streams(layers, rows: int, streams: bool) -> None:
    nets = layers(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, [1, rows, 1024])], {"w": _weights(1024, 1024)}
    )
    assert (streamed_weight_bytes(nets["y"]) == 4 << 20) is streams


def test_half_precision_and_small_weights(layers) -> None:
    nets = layers(
        [
            helper.make_node("MatMul", ["x", "w"], ["big"]),  # 2 MiB of float16 at 1 row: streams
            helper.make_node("MatMul", ["big", "v"], ["small"]),  # 256 KiB: read in less time than the call
        ],
        [("x", H, [1, 1024])],
        {"w": _weights(1024, 1024, dtype=np.float16), "v": _weights(1024, 128, dtype=np.float16)},
    )
    assert streamed_weight_bytes(nets["big"]) == 2 << 20
    assert 1024 * 128 * 2 < STREAMED_MIN_BYTES and streamed_weight_bytes(nets["small"]) == 0


def test_a_convolution_reuses_its_weights_and_a_gather_reads_a_few_rows(layers) -> None:
    nets = layers(
        [
            helper.make_node("Conv", ["x", "w"], ["conv"], pads=[1, 1, 1, 1]),  # 9.4 MB, 49 uses per weight
            helper.make_node("Gather", ["table", "ids"], ["emb"]),  # 24 MiB table, 4 rows read: no FLOPs counted
        ],
        [("x", F, [1, 512, 7, 7]), ("ids", TensorProto.INT64, [1, 4])],
        {"w": _weights(512, 512, 3, 3), "table": _weights(8192, 768)},
    )
    assert streamed_weight_bytes(nets["conv"]) == 0
    assert streamed_weight_bytes(nets["emb"]) == 0


def test_a_quantized_weight_counts_with_the_node_that_computes_with_it(build_model, process_proto) -> None:
    """QDQ: an int8 weight reaches its MatMul or Conv through a DequantizeLinear, which alone uses each
    element once; the weight streams where its consumer reuses it little, and only there."""
    scale, zero = np.array(0.01, np.float32), np.array(0, np.int8)
    model = build_model(
        [
            helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"]),
            helper.make_node("MatMul", ["x", "w"], ["fc"]),  # 1 row over 1 MiB of int8
            helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["c"]),
            helper.make_node("Conv", ["img", "c"], ["conv"], pads=[1, 1, 1, 1]),  # 2.25 MiB, 49 uses per weight
        ],
        [("x", F, [1, 1024]), ("img", F, [1, 512, 7, 7])],
        [("fc", F, None), ("conv", F, None)],
        {"wq": np.ones((1024, 1024), np.int8), "cq": np.ones((512, 512, 3, 3), np.int8), "s": scale, "z": zero},
        opset=13,
    )
    graph = process_proto(model).graph
    at = {layer.outputs[0].name: layer.index for layer in graph.layers}
    assert streamed_weight_bytes(network_of(graph, [at["w"], at["fc"]])[1]) == 1 << 20  # the int8 bytes
    assert streamed_weight_bytes(network_of(graph, [at["c"], at["conv"]])[1]) == 0
    assert streamed_weight_bytes(network_of(graph, [at["w"]])[1]) == 0  # its consumer not in the network


def test_only_networks_stream_never_a_whole_model(build_model, process_proto) -> None:
    model = build_model(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)],
        [("x", F, [1, 1024])],
        [("y", F, None)],
        {"w": _weights(512, 1024)},
    )
    runtime = OnnxRuntimeCPU(threads=1)
    plan = plan_model(process_proto(model), runtime, (1,))
    specs = specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True)
    assert {s.kind: streams_weights(s) for s in specs if s.kind in (SpecKind.MODEL, SpecKind.LAYER)} == {
        SpecKind.MODEL: False,
        SpecKind.LAYER: True,
    }


# -- the host's caches ---------------------------------------------------------------------------


def test_the_last_level_cache_is_the_largest_data_cache_sysfs_lists(tmp_path) -> None:
    listed = [("Data", "32K"), ("Instruction", "64M"), ("Unified", "1024K"), ("Unified", "32768K")]
    for i, (kind, size) in enumerate(listed):
        index = tmp_path / f"index{i}"
        index.mkdir()
        (index / "type").write_text(kind + "\n")
        (index / "size").write_text(size + "\n")
    assert host_cache.last_level_cache_bytes(tmp_path) == 32 << 20
    assert host_cache.last_level_cache_bytes(tmp_path / "absent") > 0  # sysconf's, or the default


# -- the harness ---------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now


def test_before_runs_untimed_before_every_timed_call() -> None:
    clock, log = Clock(), []

    def call() -> None:
        log.append("call")
        clock.now += 10_000

    def before() -> None:
        log.append("before")
        clock.now += 3_000_000  # an eviction: far longer than the call, and never in its time

    s = HarnessSettings(warmup_runs=1, min_samples=5, min_time_s=0, target_rel_stderr=10.0, disturbance_retries=0)
    timing = measure(call, s, clock=clock, before=before)
    assert timing.samples == pytest.approx((1e-5,) * timing.stats.n)
    timed = log[1:]  # after the warm-up call, every call comes right after an eviction
    assert timed == ["before", "call"] * (len(timed) // 2)
    log.clear()
    s = s.model_copy(update={"min_sample_time_s": 5e-5})  # calibration batches 8 calls, each evicted and timed alone
    rounds = measure_interleaved([call, call], s, clock=clock, before=[before, None])
    cold, warm = rounds.timings
    assert isinstance(cold, Timing) and isinstance(warm, Timing)
    assert cold.iterations == warm.iterations == 8
    assert cold.samples == pytest.approx(warm.samples)  # the eviction's 3 ms never counted
    with pytest.raises(ValueError, match="before"):
        measure_interleaved([call, call], s, clock=clock, before=[before])


# -- on ONNX Runtime -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gemv(build_model, process_proto):
    """A fully connected layer at batch 1 whose weights fill a quarter of the last-level cache (at least 1 MiB):
    small enough to stay there between two calls on a host whose cache other tenants share."""
    inputs = 1024
    outputs = max(STREAMED_MIN_BYTES, host_cache.last_level_cache_bytes() // 4) // (4 * inputs)
    model = build_model(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)],
        [("x", F, [1, inputs])],
        [("y", F, None)],
        {"w": _weights(outputs, inputs)},
    )
    runtime = OnnxRuntimeCPU(threads=1)
    plan = plan_model(process_proto(model), runtime, ())
    return runtime, next(s for s in specs_for_plan(plan, runtime.name, runtime.variant()) if streams_weights(s))


@pytest.fixture(scope="module")
def gemv_model(gemv, build_model, tmp_path_factory):
    """The whole model of ``gemv`` as a MODEL spec (its weights: a quarter of the last-level cache)."""
    runtime, layer = gemv
    path = tmp_path_factory.mktemp("gemv") / "gemv.onnx"
    inputs, outputs = layer.network.nodes[0].inputs, layer.network.nodes[0].outputs
    rows = next(r.shape for r in inputs if r.kind is RefKind.WEIGHT)
    model = build_model(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)],
        [("x", F, list(layer.network.inputs[0].shape))],
        [("y", F, list(outputs[0].shape))],
        {"w": _weights(*rows)},
    )
    path.write_bytes(model.SerializeToString())
    plan = plan_model_file(path, [runtime])[0][0]
    return next(s for s in specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True) if s.kind is SpecKind.MODEL)


def test_evicted_weights_are_read_from_memory_slower_than_from_the_cache(gemv) -> None:
    """Emptied caches (``flush_bytes``) make the GEMV read its weights from memory; 1 MiB of other data
    leaves most of them cached, nearly as warm.

    A timing on a shared host: other tenants empty the cache too, now and then, for a whole round (or for
    three: a CI replica's rounds gave cold/little 1.07, 1.11, 1.16 while their kernels read 2.3-3.0x slower
    cold). So the difference must show in one of five rounds; an eviction that reads nothing shows it in none."""
    runtime, spec = gemv
    prepared = runtime.prepare(spec)
    flush = host_cache.flush_bytes()
    s = HarnessSettings(min_samples=30, max_samples=30, min_time_s=0, target_rel_stderr=0.0, disturbance_retries=0)
    evicted = [partial(prepared.evict_weights, flush), partial(prepared.evict_weights, 1 << 20), None]
    ratios = []
    try:
        assert prepared.evicts
        for _ in range(5):
            rounds = measure_interleaved([prepared.call] * 3, s, before=evicted)
            cold, little, warm = (statistics.median(t.samples) for t in rounds.timings)
            kernel_cold = statistics.median(prepared.kernel_times(9, evict_bytes=flush))
            kernel_warm = statistics.median(prepared.kernel_times(9))
            ratios.append((cold / warm, cold / little, kernel_cold / kernel_warm))
            if min(ratios[-1]) > 1.2:
                break
    finally:
        prepared.close()
    # 2-core VM, 32 MiB cache, 8 MiB of weights: cold/warm 1.6-2.1, cold/little 1.6-1.9, kernels 1.8-2.5
    assert max(min(r) for r in ratios) > 1.2, ratios


def test_a_streaming_layer_is_evicted_by_what_the_rest_of_its_model_reads(layers) -> None:
    """The model's weights less the layer's own, at most what empties the cache; all of that with no model
    known; nothing where the layer is all the model streams."""
    net = layers(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], [("x", F, [1, 4096])], {"w": _weights(1000, 4096)}
    )["y"]
    own = streamed_weight_bytes(net)
    flush = 64 << 20
    assert evicted_bytes(own, own + (12 << 20), flush) == 12 << 20  # an int8 decoder block's other weights
    assert evicted_bytes(own, own + (500 << 20), flush) == flush  # VGG-19's: the cache is emptied
    assert evicted_bytes(own, None, flush) == flush
    assert evicted_bytes(0, None, flush) == 0  # a network that streams nothing
    assert evicted_bytes(own, own, flush) == 0  # the model is this layer
    assert evicted_bytes(own, own // 2, flush) == 0  # an estimate below the layer's own: nothing, never negative


def test_the_eviction_reads_as_many_bytes_as_it_is_asked(monkeypatch) -> None:
    read: list[int] = []

    class Buffer(np.ndarray):
        def max(self, *args, **kwargs):  # type: ignore[override]
            read.append(self.nbytes)
            return super().max(*args, **kwargs)

    buffer = np.ones(1 << 20, np.float32).view(Buffer)
    monkeypatch.setattr(host_cache, "_buffer", lambda: buffer)
    host_cache.evict(1 << 20)
    host_cache.evict(None)
    host_cache.evict(1 << 30)  # never more than the buffer
    host_cache.evict(1)  # never nothing
    assert read == [1 << 20, 4 << 20, 4 << 20, 4] and host_cache.flush_bytes() == 4 << 20


def test_records_say_their_weights_were_evicted_and_a_setting_turns_it_off(gemv, fast_harness) -> None:
    runtime, spec = gemv
    where = {"system": "vm", "stack_id": "s"}
    interleaved = run_interleaved([spec], runtime, fast_harness, **where)[0]
    sequential = run_spec(spec, runtime, fast_harness, **where)
    for record in (interleaved, sequential):
        assert record.outcome is Outcome.OK and record.settings["weights"] == COLD_WEIGHTS
        assert record.settings["weights_evicted_by_bytes"] == host_cache.flush_bytes()  # no model beside it
        assert record.kernel_samples
    off = fast_harness.model_copy(update={"evict_streamed_weights": False})
    assert "weights" not in run_spec(spec, runtime, off, **where).settings
    assert "weights" not in run_interleaved([spec], runtime, off, **where)[0].settings


def test_beside_its_model_a_layer_is_evicted_by_the_rest_of_the_model(gemv, gemv_model, fast_harness) -> None:
    """A model that is the layer alone reads nothing else between its runs: the layer is timed warm, as the
    model runs it; beside a larger model, after the rest of that model's weights."""
    runtime, layer = gemv
    where = {"system": "vm", "stack_id": "s"}
    model, alone = run_interleaved([gemv_model, layer], runtime, fast_harness, **where)
    assert model.outcome is alone.outcome is Outcome.OK and "weights" not in alone.settings
    rest = host_cache.last_level_cache_bytes() // 2
    read = gemv_model.model["read_weight_bytes"]
    larger = replace(gemv_model, model={**gemv_model.model, "read_weight_bytes": read + rest})
    beside = run_interleaved([larger, layer], runtime, fast_harness, **where)[1]
    assert beside.settings["weights"] == COLD_WEIGHTS
    # the layer's bias is among the model's weights, not among the streamed ones
    assert rest <= beside.settings["weights_evicted_by_bytes"] <= rest + 4096 * 4


def _int4_matmul(rows: int, k: int = 2048, n: int = 2048, block: int = 32) -> tuple:
    """onnxruntime-genai's int4 projection: ``com.microsoft::MatMulNBits`` over packed 4-bit weights."""
    blocks = k // block
    node = helper.make_node(
        "MatMulNBits", ["x", "b", "scales"], ["y"], domain="com.microsoft", K=k, N=n, bits=4, block_size=block
    )
    arrays = {"b": np.zeros((n, blocks, block // 2), np.uint8), "scales": np.ones((n * blocks,), np.float32)}
    return [node], [("x", F, [1, rows, k])], arrays


@pytest.mark.parametrize(("rows", "streams"), [(1, True), (4, True), (64, False)])
def test_an_int4_projection_counts_its_flops_and_streams_its_packed_weights_at_one_token(
    build_model, process_proto, rows: int, streams: bool
) -> None:
    """A decoder step uses each int4 weight once: it streams 2 MiB of packed weights and their scales,
    and is timed with them out of the caches as a float32 product of one row is; a prompt of 64 does not."""
    nodes, inputs, arrays = _int4_matmul(rows)
    model = build_model(nodes, inputs, [("y", F, None)], arrays, extra_opsets={"com.microsoft": 1})
    graph = process_proto(model).graph
    (layer,) = graph.layers
    assert layer.flops == 2 * rows * 2048 * 2048
    packed = 2048 * 64 * 16 + 2048 * 64 * 4  # the uint8 blocks and the float scales
    assert streamed_weight_bytes(network_of(graph, [0])[1]) == (packed if streams else 0)


def test_a_model_reads_the_rows_of_its_embedding_not_the_table(build_model, process_proto) -> None:
    """What the rest of a decoder reads between two runs of a projection: its weights, its embedding
    table counted as the rows one token reads (a table of 32000 x 256 floats, 31 MiB, reads 1 KiB)."""
    model = build_model(
        [
            helper.make_node("Gather", ["table", "ids"], ["emb"]),
            helper.make_node("MatMul", ["emb", "w"], ["y"]),
        ],
        [("ids", TensorProto.INT64, [1, 1])],
        [("y", F, None)],
        {"table": _weights(32000, 256), "w": _weights(256, 1024)},
    )
    graph = process_proto(model).graph
    assert weights_read_per_run(graph) == 256 * 4 + 256 * 1024 * 4
    assert weight_bytes(graph) == 32000 * 256 * 4 + 256 * 1024 * 4  # what the memory guard counts: all held
    (spec,) = [
        s
        for s in specs_for_plan(
            plan_model(process_proto(model), OnnxRuntimeCPU(threads=1)), "onnxruntime", {}, e2e=True
        )
        if s.kind is SpecKind.MODEL
    ]
    assert model_weight_bytes(spec) == weights_read_per_run(graph)
    before = replace(spec, model={k: v for k, v in spec.model.items() if k != "read_weight_bytes"})
    assert model_weight_bytes(before) == weight_bytes(graph)  # a spec stored before: every weight it holds
