"""The whole corpus end to end at batch 1 (issue 14): shaped, checked against ONNX Runtime, benchmarked.

For every model of ``corpus/`` at batch 1 (text models at their corpus sequence length):

- it loads and processes, and every node of the processed graph is a layer with known shapes
  or a constant computation: none is left unbenchmarkable;
- the output shapes benanza gives its Conv, MatMul and Gemm layers and their quantized forms
  are those ONNX Runtime produces running the model (with synthesised weights);
- ``bench`` measures every layer, fused group and the model whole with no failure, and the
  analysis covers every node (coverage 100%);
- the lower bound is at most the end-to-end latency (the tolerance is below).

The corpus is benchmarked once for the module, with the harness's shortest settings
(``FAST``): the point is that every benchmark runs and composes, not its precision.

The int8 QOperator models' ONNX Runtime contrib ops (``com.microsoft::QLinearAdd``...) are
layers like any other (operator schemas from ONNX Runtime's registry).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

from benanza.bench.generate import plan_model
from benanza.bench.harness import HarnessSettings
from benanza.bench.records import Outcome
from benanza.local import analyze, bench, open_local
from benanza.model.load import with_synthetic_weights
from benanza.model.process import process_model
from benanza.model.request import BindingRequest
from benanza.runtimes.onnxruntime import feeds_for

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
MANIFEST = json.loads((CORPUS / "corpus.json").read_text())
BY_NAME = {e["name"]: e for e in MANIFEST}
# the ops whose shapes decide most of a model's cost, and their int8 forms
SHAPE_CHECKED = {"Conv", "MatMul", "Gemm", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QGemm"}
# Each call known to 5%, not the default 1%: at 1% every interleaved group ran to its time cap (56
# rounds; four of the models took 151 s against 74 s at 5%, one after the other on the shared 2-core
# VM). The whole fixture took 802 of the suite's 1747 s at 1% and 626 s at 5% (its own run, 2026-11-27).
FAST = HarnessSettings(
    warmup_runs=1, min_samples=3, min_time_s=0.001, max_time_s=0.05, kernel_runs=3, target_rel_stderr=0.05
)


# Models whose lower bound, measured with the shortest settings, exceeds even the slowest
# end-to-end call, reproduced in a second run: a fault of the composition rather than noise.
# Strict, so that the fix drops the mark. (The int8 QDQ models were here until a weight's
# DequantizeLinear became a layer, so their units fuse into QLinear kernels as ORT runs them.)
BOUND_ABOVE_E2E: dict[str, str] = {}


def cases(known: dict[str, str] | None = None) -> list:
    """Every corpus model; those of ``known`` marked as strict expected failures with their reason."""
    out = []
    for name in sorted(BY_NAME):
        if known and name in known:
            out.append(pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=known[name])))
        else:
            out.append(name)
    return out


@pytest.fixture(scope="module")
def processed():
    """name -> the model processed at batch 1, each processed once for the module."""
    cache = {}

    def get(name: str):
        if name not in cache:
            entry = BY_NAME[name]
            cache[name] = process_model(CORPUS / entry["file"], 1, BindingRequest.parse(entry["shape_args"]))
        return cache[name]

    return get


@pytest.fixture(scope="module")
def benchmarked(processed, tmp_path_factory):
    """The whole corpus benchmarked once into a fresh SQLite store: name -> (plan, lower bound, records)."""
    db = tmp_path_factory.mktemp("corpus-e2e") / "corpus.db"
    ctx = open_local(db=f"sqlite:///{db}", runtime_options={"threads": 1}, system="corpus-e2e", settings=FAST)
    try:
        names = sorted(BY_NAME)
        plans = []
        for name in names:
            request = BindingRequest.parse(BY_NAME[name]["shape_args"])
            plans.append(plan_model(processed(name), ctx.runtime, batch=1, request=request))
        summary = bench(ctx, plans, e2e=True)
        out = {}
        for name, plan, row in zip(names, plans, analyze(ctx, plans), strict=True):
            keys = set(plan.networks) | {plan.model_key}
            out[name] = (plan, row, ctx.store.records(system=ctx.system, stack_id=ctx.stack_id, keys=keys))
        yield summary, out
    finally:
        ctx.close()


@pytest.mark.parametrize("name", cases())
def test_every_node_is_a_shaped_layer_or_a_constant_computation(name, processed):
    model = processed(name)
    graph = model.graph
    assert [f"{u.op_type}: {u.reason}" for u in graph.unsupported] == []
    assert len(graph.layers) + graph.constant_nodes == len(model.proto.graph.node)
    for layer in graph.layers:
        for tensor in [i.tensor for i in layer.inputs] + list(layer.outputs):
            assert all(isinstance(d, int) and d >= 0 for d in tensor.shape), (layer.name, tensor.name, tensor.shape)


@pytest.mark.parametrize("name", cases())
def test_conv_matmul_gemm_output_shapes_are_onnx_runtimes(name, processed):
    """Every shape-checked layer's outputs, as benanza has them, against ONNX Runtime's run of the model."""
    model = processed(name)
    ours = {t.name: t.shape for layer in model.graph.layers if layer.op_type in SHAPE_CHECKED for t in layer.outputs}
    in_file = {n.op_type for n in onnx.load(str(CORPUS / BY_NAME[name]["file"]), load_external_data=False).graph.node}
    assert bool(ours) == bool(in_file & SHAPE_CHECKED)  # a model with such ops has such layers
    if not ours:
        return
    runnable = with_synthetic_weights(model.proto)
    outputs = {o.name for o in runnable.graph.output}
    runnable.graph.output.extend(onnx.ValueInfoProto(name=n) for n in ours if n not in outputs)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # every node runs as written
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(runnable.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = list(ours)
    theirs = dict(zip(names, (tuple(v.shape) for v in session.run(names, feeds_for(runnable))), strict=True))
    assert {n: tuple(s) for n, s in ours.items()} == theirs


@pytest.fixture(scope="module")
def bench_summary(benchmarked):
    return benchmarked[0]


def test_the_corpus_bench_run_has_no_failure(bench_summary):
    assert bench_summary.failed == 0, [r.reason for r in bench_summary.records if r.outcome == Outcome.FAILED][:5]
    assert bench_summary.skipped == 0 and bench_summary.deferred == 0
    assert bench_summary.measured > 4000  # every unique layer and group of the corpus, and its 50 models


@pytest.mark.parametrize("name", cases())
def test_every_layer_is_benchmarked_with_full_coverage(name, benchmarked):
    plan, row, records = benchmarked[1][name]
    by_key = {r.key: r for r in records}
    for key in [*plan.networks, plan.model_key]:
        assert by_key[key].outcome == Outcome.OK, (key, by_key[key].reason)
    assert row.missing == ()
    assert row.coverage == 1.0
    assert row.sequential_ms is not None and row.e2e_ms is not None


# The lower bound (sum of each unit's 10th-percentile kernel time) and the end-to-end latency
# (20% trimmed mean of whole-model calls) come from benchmarks taken at different moments, each
# from three samples or fewer here (FAST: a model of more than 50 ms gets one call). So each
# model's bound is held to its slowest measured call with a tolerance, and the corpus's median
# bound to its trimmed mean: a systematic excess (profiler overhead left in, a unit counted
# twice) shows there. The tolerance: on the shared 2-core VM the same model's end-to-end latency
# differed by up to 1.9x between two runs minutes apart (resnet50: 321 and 165 ms,
# benchmarks/results/benchmarking_time_corpus_before/after.json), and detr_resnet50 and
# resnet50_int8_qdq came out 10% over their single call once; the faults this test found were
# 48% over or more (the last, whisper_encoder_fp16 at 1.49x in CI: ORT's inserted float16 casts
# counted in every unit run alone, now left out of kernel times).
BOUND_TOLERANCE = 1.25


@pytest.mark.parametrize("name", cases(known=BOUND_ABOVE_E2E))
def test_the_lower_bound_is_at_most_end_to_end(name, benchmarked):
    plan, row, records = benchmarked[1][name]
    e2e = next(r for r in records if r.key == plan.model_key)
    assert row.sequential_ms is not None
    assert row.sequential_ms <= BOUND_TOLERANCE * max(e2e.samples) * 1e3, row.checks


def test_the_corpus_lower_bounds_are_below_end_to_end_in_the_median(benchmarked):
    ratios = [row.sequential_ms / row.e2e_ms for _, row, _ in benchmarked[1].values() if row.sequential_ms]
    assert len(ratios) == len(BY_NAME)
    assert statistics.median(ratios) <= 1.0, sorted(ratios)
