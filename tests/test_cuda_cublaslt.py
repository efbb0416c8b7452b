"""cublasLt GEMMs: operand shapes, compute types and algorithm names on the CPU; every algorithm on the device.

The CPU tests cover the pure decisions (which arrays a GEMM needs in ONNX's row-major
layout, which compute type and implementation mask a variant asks for, how an algorithm is
named); the ``gpu`` tests plan real GEMMs with nvmath-python, launch every algorithm the
heuristic offers and compare with NumPy within tolerances for TF32 and half precision.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from benanza.errors import GpuError, UnsupportedLayer
from benanza.runtimes.cuda.cublaslt import (
    ALL_IMPLEMENTATIONS,
    OP_TYPE_TENSOR_MASK,
    algorithm_name,
    compute_type_choice,
    gemm_candidates,
    gemm_shapes,
    implementation_mask,
    uses_tensor_cores,
)
from benanza.runtimes.cuda.params import GemmParams


def gemm(batch=1, m=4, n=5, k=3, trans_a=False, trans_b=False, dtype="float32", **kw):
    return GemmParams(batch, m, n, k, trans_a, trans_b, dtype, **kw)


def product_shape(shapes):
    """What NumPy makes of the stored arrays with their transposed views: must be the result's shape."""
    a = np.zeros(shapes.a)
    b = np.zeros(shapes.b)
    a = a.swapaxes(-1, -2) if shapes.a_transposed else a
    b = b.swapaxes(-1, -2) if shapes.b_transposed else b
    return np.matmul(a, b).shape


# ------------------------------------------------------------------------ shapes


@pytest.mark.parametrize(
    ("p", "a", "b", "c"),
    [
        (gemm(m=4, n=5, k=3), (4, 3), (3, 5), (4, 5)),
        (gemm(m=4, n=5, k=3, trans_a=True), (3, 4), (3, 5), (4, 5)),
        (gemm(m=4, n=5, k=3, trans_b=True), (4, 3), (5, 3), (4, 5)),  # Gemm with transB: an FC weight (n, k)
        (gemm(m=4, n=5, k=3, trans_a=True, trans_b=True), (3, 4), (5, 3), (4, 5)),
        (gemm(batch=6, m=4, n=5, k=3), (6, 4, 3), (6, 3, 5), (6, 4, 5)),
        (gemm(batch=6, m=4, n=5, k=3, b_batched=False), (6, 4, 3), (3, 5), (6, 4, 5)),
        (gemm(batch=6, m=4, n=5, k=3, a_batched=False), (4, 3), (6, 3, 5), (6, 4, 5)),
        (gemm(batch=1, m=4, n=5, k=3, a_batched=False, b_batched=False), (4, 3), (3, 5), (4, 5)),
    ],
)
def test_gemm_shapes_follow_onnx_storage(p, a, b, c):
    shapes = gemm_shapes(p)
    assert (shapes.a, shapes.b, shapes.c) == (a, b, c)
    assert (shapes.a_transposed, shapes.b_transposed) == (p.trans_a, p.trans_b)
    assert product_shape(shapes) == c
    assert shapes.batched == (p.batch > 1)


def test_a_batch_without_a_batched_operand_is_unsupported():
    with pytest.raises(UnsupportedLayer, match="neither operand is batched"):
        gemm_shapes(gemm(batch=3, a_batched=False, b_batched=False))
    with pytest.raises(UnsupportedLayer, match="empty extent"):
        gemm_shapes(gemm(m=0))


# ------------------------------------------------------------------------ compute types


def test_compute_type_table():
    table = {
        (dtype, tc): compute_type_choice(dtype, tc)
        for dtype in ("float32", "float16", "bfloat16", "float64")
        for tc in (True, False)
    }
    assert table == {
        ("float32", True): ("COMPUTE_32F_FAST_TF32", False),
        ("float32", False): ("COMPUTE_32F", True),
        ("float16", True): ("COMPUTE_32F", False),
        ("float16", False): ("COMPUTE_32F", True),
        ("bfloat16", True): ("COMPUTE_32F", False),
        ("bfloat16", False): ("COMPUTE_32F", True),
        ("float64", True): ("COMPUTE_64F", False),
        ("float64", False): ("COMPUTE_64F", True),
    }
    with pytest.raises(UnsupportedLayer, match="int8"):
        compute_type_choice("int8", True)


def test_implementation_mask_drops_only_tensor_core_op_types():
    assert implementation_mask(False) == ALL_IMPLEMENTATIONS
    mask = implementation_mask(True)
    assert mask & OP_TYPE_TENSOR_MASK == 0
    assert mask & 0x1  # OP_TYPE_FMA stays allowed
    assert mask & 0x200 and mask & 0x80000  # accumulator and input types are not filtered
    assert mask < 2**64


def test_tensor_core_use_is_read_from_the_implementation_flags():
    fma_fp32 = 0x1 | 0x200 | 0x80000  # OP_TYPE_FMA | ACCUMULATOR_32F | INPUT_TYPE_32F
    hmma_fp16 = 0x2 | 0x200 | 0x10000  # OP_TYPE_TENSOR_HMMA | ACCUMULATOR_32F | INPUT_TYPE_16F
    assert uses_tensor_cores(fma_fp32) is False
    assert uses_tensor_cores(hmma_fp16) is True
    assert uses_tensor_cores(0x8) is True  # DMMA: double-precision Tensor Cores
    assert uses_tensor_cores(None) is None


# ------------------------------------------------------------------------ names


def test_algorithm_name_from_plain_values():
    name = algorithm_name(21, (128, 256, 64), (64, 3), 1, 0, 0, 0, "AUTO")
    assert name == "algo21-tile128x256x64-stages64x3-splitk1-reduction0-swizzle0-custom0-clusterauto"
    assert (
        algorithm_name(6, "UNDEFINED", "UNDEFINED", cta_swizzling=True)
        == "algo6-tileundefined-stagesundefined-swizzle1"
    )
    assert algorithm_name(6) == "algo6"  # fields the library did not report are left out
    assert algorithm_name(6, split_k=4) != algorithm_name(6, split_k=1)


def test_missing_nvmath_is_a_gpu_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvmath.linalg.advanced", None)
    with pytest.raises(GpuError, match="nvmath-python"):
        gemm_candidates(None, gemm(), True)


def fake_nvmath(monkeypatch, freed: list[str], executed: list[str]) -> None:
    """nvmath.linalg.advanced as far as gemm_plan uses it: two algorithms, and a Matmul that says when it is freed."""
    import types

    class Matmul:
        def __init__(self, a, b, c, **_):
            self.c = c

        def plan(self, **_):
            return [types.SimpleNamespace(algorithm_id=i) for i in (7, 9)]

        def execute(self, algorithm, stream):
            executed.append(f"algo{algorithm.algorithm_id}")

        def free(self):
            freed.append("matmul")

    adv = types.ModuleType("nvmath.linalg.advanced")
    adv.Matmul, adv.MatmulOptions, adv.MatmulPlanPreferences = Matmul, dict, dict
    adv.MatmulComputeType = {"COMPUTE_32F_FAST_TF32": 1, "COMPUTE_32F": 2}
    linalg = types.ModuleType("nvmath.linalg")
    linalg.advanced = adv
    nvmath = types.ModuleType("nvmath")
    nvmath.linalg = linalg
    for name, module in (("nvmath", nvmath), ("nvmath.linalg", linalg), ("nvmath.linalg.advanced", adv)):
        monkeypatch.setitem(sys.modules, name, module)


def test_the_matmul_is_freed_when_the_candidates_are_dropped_not_by_the_cyclic_collector(monkeypatch):
    """The collector runs at any moment: inside a gated sample, a Matmul's free waited for the gate
    until it timed out (three such left an H100 run's samples ungated), and inside a capture it broke it."""
    import gc
    import types

    freed: list[str] = []
    executed: list[str] = []
    fake_nvmath(monkeypatch, freed, executed)
    ctx = types.SimpleNamespace(stream="stream", stream_ptr=0, array=lambda shape, dtype, fill: np.zeros(shape, dtype))
    enabled = gc.isenabled()
    gc.disable()
    try:
        candidates = gemm_candidates(ctx, gemm(), True)
        assert [c.name for c in candidates] == ["algo7", "algo9"] and candidates[0].default
        launches = [c.launch for c in candidates]
        del candidates
        for launch in launches:
            launch()
        assert executed == ["algo7", "algo9"] and not freed  # a launch keeps its Matmul
        del launch, launches
        assert freed == ["matmul"]  # at once, with the collector off
    finally:
        if enabled:
            gc.enable()


# ------------------------------------------------------------------------ on the device


@pytest.fixture(scope="module")
def ctx():
    from benanza.runtimes.cuda.device import DeviceContext

    context = DeviceContext(0)
    yield context
    context.close()


def reference(plan, p, c_before):
    import cupy

    a = cupy.asnumpy(plan.a).astype(np.float64)
    b = cupy.asnumpy(plan.b).astype(np.float64)
    a = a.swapaxes(-1, -2) if plan.shapes.a_transposed else a
    b = b.swapaxes(-1, -2) if plan.shapes.b_transposed else b
    out = p.alpha * np.matmul(a, b)
    if p.bias:
        out = out + p.beta * c_before
    return out


GPU_CASES = [
    pytest.param(gemm(m=64, n=48, k=96), False, 1e-4, id="fp32-fma"),
    pytest.param(gemm(m=64, n=48, k=96), True, 3e-2, id="fp32-tf32"),
    pytest.param(gemm(m=64, n=48, k=96, dtype="float16"), True, 3e-2, id="fp16-tc"),
    pytest.param(gemm(m=33, n=17, k=40, trans_a=True, trans_b=True), False, 1e-4, id="fp32-transposed"),
    pytest.param(gemm(batch=3, m=32, n=16, k=24, b_batched=False, dtype="float16"), True, 3e-2, id="fp16-shared-b"),
    pytest.param(gemm(m=16, n=32, k=8, alpha=2.0, beta=0.5, bias=True, trans_b=True), False, 1e-4, id="fp32-bias"),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("p", "tensor_cores", "tol"), GPU_CASES)
def test_every_algorithm_computes_the_gemm(ctx, p, tensor_cores, tol):
    import cupy

    from benanza.runtimes.cuda.cublaslt import gemm_plan

    plan = gemm_plan(ctx, p, tensor_cores)
    assert plan.candidates and plan.candidates[0].default and sum(c.default for c in plan.candidates) == 1
    assert [c.heuristic_rank for c in plan.candidates] == list(range(len(plan.candidates)))
    assert len({c.name for c in plan.candidates}) == len(plan.candidates)
    if not tensor_cores:
        assert all(c.tensor_cores is False for c in plan.candidates)
    with ctx.stream:
        c_before = plan.c.copy()
    c_host = cupy.asnumpy(c_before).astype(np.float64)
    want = reference(plan, p, c_host)
    for candidate in plan.candidates:
        with ctx.stream:  # in place: each algorithm starts from the same C
            plan.c[...] = c_before
        candidate.launch()
        ctx.synchronize()
        got = cupy.asnumpy(plan.c).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(p.k), err_msg=candidate.name)


@pytest.mark.gpu
def test_half_without_tensor_cores_is_fma_only_or_unsupported(ctx):
    from benanza.runtimes.cuda.cublaslt import gemm_plan

    try:
        plan = gemm_plan(ctx, gemm(m=64, n=64, k=64, dtype="float16"), False)
    except UnsupportedLayer as exc:
        assert "without Tensor Cores" in str(exc)
        return
    assert all(c.tensor_cores is False for c in plan.candidates)


@pytest.mark.gpu
def test_launch_only_enqueues(ctx):
    """execute() must not synchronise: a launch returns while a large GEMM is still running."""
    import cupy

    from benanza.runtimes.cuda.cublaslt import gemm_plan

    plan = gemm_plan(ctx, gemm(m=4096, n=4096, k=4096), False)
    launch = plan.candidates[0].launch
    launch()  # warm-up: the workspace is allocated on the first execute
    ctx.synchronize()
    for _ in range(3):
        launch()
    assert not ctx.stream.done  # three fp32 4096^3 GEMMs (about 0.4 TFLOP) cannot be done yet
    ctx.synchronize()
    assert cupy.isfinite(plan.c).all()
