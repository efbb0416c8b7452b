"""GEMMs through cublasLt (``nvmath-python``): one candidate per algorithm the heuristic returns.

On Ampere and Hopper the ``algo`` argument of ``cublasGemmEx`` no longer selects a kernel;
cublasLt's heuristic (``cublasLtMatmulAlgoGetHeuristic``) is where the algorithms a framework
could run are listed. ``nvmath.linalg.advanced.Matmul`` wraps it: ``plan()`` returns the
heuristic's algorithms, best first, and ``execute(algorithm=...)`` runs any one of them.
The first is what PyTorch and ONNX Runtime get from cuBLAS without benchmarking, so it is
the candidate marked ``default``.

What was verified in nvmath-python 1.0's source (``nvmath/linalg/advanced/matmulmod.py``,
``_configuration.py``, ``_algorithmmod.py``, ``nvmath/internal/utils.py``):

- ``Matmul(a, b, c, alpha=, beta=, options=MatmulOptions(...), stream=)``; ``c`` must be at
  least 2-D and ``beta`` is required with it. ``MatmulOptions.inplace=True`` writes the
  result into ``c``: ``execute`` then allocates nothing (without it every ``execute``
  allocates a fresh result tensor, which a CUDA graph capture cannot replay cleanly).
- ``MatmulOptions.blocking`` is ``'auto'`` by default: with device operands ``execute``
  only enqueues (it records an event after the call and does not synchronise), which is
  what a launch must do. ``True`` would synchronise after every call.
- ``plan(preferences=MatmulPlanPreferences(limit=N, numerical_impl_mask=...))`` returns
  ``Algorithm`` objects (``algorithm_id``, ``tile``, ``stages``, ``split_k``,
  ``reduction_scheme``, ``cta_swizzling``, ``custom_option``, ``cluster_shape``,
  ``capabilities.numerical_impl_flags``); each wraps a ``cublasLtMatmulHeuristicResult_t``
  whose ``workspace_size`` is that algorithm's. The workspace nvmath allocates is the
  largest of them, once, on the first ``execute``, and kept.
- Compute types: ``MatmulComputeType`` (cuBLAS ``cublasComputeType_t``). In cublasLt, TF32
  is opt-in through ``COMPUTE_32F_FAST_TF32``; ``COMPUTE_32F`` keeps float32 products in
  float32. There is no math mode in cublasLt, so what forbids Tensor Cores for half inputs
  is the heuristic's implementation mask (``CUBLASLT_MATMUL_PREF_IMPL_MASK``): the mask
  used when ``tensor_cores`` is False drops every ``OP_TYPE_TENSOR_*`` implementation
  (HMMA covers fp16, bf16 and TF32). If cublasLt has no non-Tensor-Core kernel for the
  problem, the layer is unsupported for that variant, and says so.

Operands follow ONNX's row-major storage; ``trans_a``/``trans_b`` are transposed views of
the stored matrices, which nvmath turns into cublasLt transpose flags. Pure helpers come
first; only the functions that build candidates import nvmath, CuPy or torch.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from benanza.errors import GpuError, UnsupportedLayer, one_line
from benanza.runtimes.cuda.candidate import Candidate
from benanza.runtimes.cuda.params import GemmParams, Shape

SOURCE = "cublaslt"
DEFAULT_LIMIT = 16  # algorithms asked of the heuristic (nvmath's default is 8)
INSTALL_HINT = "pip install 'benanza[gpu]' (nvmath-python, cupy)"

# (dtype, tensor_cores) -> (cublasComputeType_t name, whether Tensor Core implementations are masked out)
COMPUTE_TYPES: dict[tuple[str, bool], tuple[str, bool]] = {
    ("float32", True): ("COMPUTE_32F_FAST_TF32", False),
    ("float32", False): ("COMPUTE_32F", True),
    ("float16", True): ("COMPUTE_32F", False),
    ("float16", False): ("COMPUTE_32F", True),
    ("bfloat16", True): ("COMPUTE_32F", False),
    ("bfloat16", False): ("COMPUTE_32F", True),
    ("float64", True): ("COMPUTE_64F", False),
    ("float64", False): ("COMPUTE_64F", True),
}

# cublasLtNumericalImplFlags_t: the OP_TYPE_TENSOR_* bits (HMMA, IMMA, DMMA, ...) and "everything".
OP_TYPE_TENSOR_MASK = 0xFE
ALL_IMPLEMENTATIONS = 0xFFFF_FFFF_FFFF_FFFF


# ------------------------------------------------------------------------ pure


@dataclass(frozen=True, slots=True)
class GemmShapes:
    """The arrays one GEMM needs, as ONNX stores them (row-major).

    ``a``/``b`` are the stored shapes; the multiplied matrices are their last two axes
    swapped when ``a_transposed``/``b_transposed``. ``c`` is the result's shape, which the
    (in-place) bias operand shares.
    """

    a: Shape
    a_transposed: bool
    b: Shape
    b_transposed: bool
    c: Shape

    @property
    def batched(self) -> bool:
        return len(self.c) == 3


def gemm_shapes(p: GemmParams) -> GemmShapes:
    """Stored shapes of A, B and the result for ``p``: batched operands are 3-D, a shared one 2-D.

    Raises:
        UnsupportedLayer: a batch of products with no batched operand (nothing to batch over).
    """
    if min(p.batch, p.m, p.n, p.k) < 1:
        raise UnsupportedLayer(f"GEMM with an empty extent (batch={p.batch}, m={p.m}, n={p.n}, k={p.k})")
    a_batched = p.a_batched and p.batch > 1
    b_batched = p.b_batched and p.batch > 1
    if p.batch > 1 and not (a_batched or b_batched):
        raise UnsupportedLayer(f"a batch of {p.batch} products where neither operand is batched")
    a = (p.k, p.m) if p.trans_a else (p.m, p.k)
    b = (p.n, p.k) if p.trans_b else (p.k, p.n)
    lead = (p.batch,) if p.batch > 1 else ()
    return GemmShapes(
        a=(*lead, *a) if a_batched else a,
        a_transposed=p.trans_a,
        b=(*lead, *b) if b_batched else b,
        b_transposed=p.trans_b,
        c=(*lead, p.m, p.n),
    )


def compute_type_choice(dtype: str, tensor_cores: bool) -> tuple[str, bool]:
    """The compute type for ``dtype`` and whether Tensor Core implementations are masked out.

    Raises:
        UnsupportedLayer: a data type cublasLt GEMMs are not measured in.
    """
    choice = COMPUTE_TYPES.get((dtype, bool(tensor_cores)))
    if choice is None:
        known = sorted({d for d, _ in COMPUTE_TYPES})
        raise UnsupportedLayer(f"cublasLt GEMM in {dtype}: benanza measures {', '.join(known)}")
    return choice


def implementation_mask(exclude_tensor_cores: bool) -> int:
    """``numerical_impl_mask`` for the heuristic: every implementation, or all but Tensor Core ones."""
    return ALL_IMPLEMENTATIONS & ~OP_TYPE_TENSOR_MASK if exclude_tensor_cores else ALL_IMPLEMENTATIONS


def uses_tensor_cores(numerical_impl_flags: int | None) -> bool | None:
    """Whether an algorithm's ``CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS`` name a Tensor Core op type."""
    if numerical_impl_flags is None:
        return None
    return bool(int(numerical_impl_flags) & OP_TYPE_TENSOR_MASK)


def _config_part(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "x".join(str(v) for v in value)
    return str(value).lower()


def algorithm_name(
    algorithm_id: int,
    tile: Any = None,
    stages: Any = None,
    split_k: int | None = None,
    reduction_scheme: int | None = None,
    cta_swizzling: int | bool | None = None,
    custom_option: int | None = None,
    cluster_shape: Any = None,
) -> str:
    """A stable name for one cublasLt algorithm configuration from its plain attribute values.

    The heuristic can return one algorithm id several times with different tiles, stages or
    split-K, so every configuration field is part of the name; a field the library could not
    report (None) is left out. Example: ``algo21-tile128x256x64-stages64x3-splitk1``.
    """
    parts = [f"algo{int(algorithm_id)}"]
    for label, value in (
        ("tile", tile),
        ("stages", stages),
        ("splitk", split_k),
        ("reduction", reduction_scheme),
        ("swizzle", None if cta_swizzling is None else int(cta_swizzling)),
        ("custom", custom_option),
        ("cluster", cluster_shape),
    ):
        if value is not None:
            parts.append(f"{label}{_config_part(value)}")
    return "-".join(parts)


# ------------------------------------------------------------------------ GPU


class _Matmul:
    """The nvmath ``Matmul`` and the arrays it reads and writes, shared by one GEMM's launches.

    Freed (``Matmul.free``) as soon as the last launch that holds it is dropped, that is when the
    layer's candidates are. Nothing it holds refers back to a launch, so no reference cycle
    leaves the free to Python's cyclic collector, which runs at any moment: inside a gated
    sample, where the free's device-wide synchronisation waits for the gate until it times out
    (an H100 run lost its gate that way), or inside a graph capture, which the free breaks
    (``CUDA_ERROR_STREAM_CAPTURE_ISOLATION``).
    """

    __slots__ = ("__weakref__", "a", "b", "c", "matmul")

    def __init__(self, matmul: Any, a: Any, b: Any, c: Any) -> None:
        self.matmul, self.a, self.b, self.c = matmul, a, b, c
        weakref.finalize(self, _free_matmul, matmul)


@dataclass(eq=False)
class GemmPlan:
    """One planned cublasLt GEMM: its operands, the nvmath ``Matmul`` and the candidates.

    ``a``/``b`` are the stored arrays (ONNX layout), ``c`` the result (written in place, the
    bias when ``beta`` is non-zero). The ``Matmul`` is freed when neither the plan nor any
    candidate's launch holds it any more (``_Matmul``, in ``matmul``).
    """

    a: Any
    b: Any
    c: Any
    shapes: GemmShapes
    compute_type: str
    candidates: list[Candidate]
    matmul: _Matmul | None = None


def gemm_plan(ctx: Any, p: GemmParams, tensor_cores: bool, *, limit: int = DEFAULT_LIMIT) -> GemmPlan:
    """Plan ``p`` with cublasLt and build one candidate per algorithm of the heuristic.

    Args:
        ctx: the ``DeviceContext`` whose arrays and stream the GEMM uses.
        p: the GEMM.
        tensor_cores: False masks Tensor Core implementations out (see the module docstring).
        limit: how many algorithms to ask of the heuristic.

    Raises:
        UnsupportedLayer: no algorithm for this problem and variant (e.g. half without Tensor Cores).
        GpuError: nvmath-python or CuPy is missing.
    """
    shapes = gemm_shapes(p)
    compute_name, exclude_tensor_cores = compute_type_choice(p.dtype, tensor_cores)
    adv = _import_nvmath()

    a_store = ctx.array(shapes.a, p.dtype, "random")
    b_store = ctx.array(shapes.b, p.dtype, "random")
    c_store = ctx.array(shapes.c, p.dtype, "random" if p.bias else "zeros")
    a, b, c, stream = _operands(ctx, p.dtype, shapes, a_store, b_store, c_store)
    beta = float(p.beta) if p.bias else 0.0

    options = adv.MatmulOptions(compute_type=adv.MatmulComputeType[compute_name], inplace=True, blocking="auto")
    mask = implementation_mask(exclude_tensor_cores)
    preferences = adv.MatmulPlanPreferences(limit=int(limit), numerical_impl_mask=mask)
    try:
        mm = adv.Matmul(a, b, c, alpha=float(p.alpha), beta=beta, options=options, stream=stream)
    except (ValueError, TypeError) as exc:
        raise UnsupportedLayer(f"cublasLt (nvmath) rejects this GEMM: {one_line(exc)}") from exc
    try:
        algorithms = mm.plan(preferences=preferences, stream=stream)
    except RuntimeError as exc:  # "Planning failed to find any suitable algorithm."
        mm.free()
        variant = "without Tensor Cores" if exclude_tensor_cores else "with Tensor Cores allowed"
        raise UnsupportedLayer(
            f"cublasLt has no algorithm for this {p.dtype} GEMM {variant} ({compute_name}): {one_line(exc)}"
        ) from exc

    shared = _Matmul(mm, a_store, b_store, c_store)
    plan = GemmPlan(a_store, b_store, c_store, shapes, compute_name, [], shared)
    plan.candidates = [
        Candidate(
            source=SOURCE,
            name=_name_of(alg, position),
            launch=_MatmulLaunch(shared, alg, stream),
            workspace_bytes=_workspace_of(alg),
            tensor_cores=uses_tensor_cores(_attribute(lambda alg=alg: alg.capabilities.numerical_impl_flags)),
            heuristic_rank=position,
            default=position == 0,
            notes=(compute_name,),
        )
        for position, alg in enumerate(algorithms)
    ]
    return plan


def gemm_candidates(ctx: Any, p: GemmParams, tensor_cores: bool) -> list[Candidate]:
    """Every algorithm cublasLt's heuristic offers for ``p``, ranked, the first one the default."""
    return gemm_plan(ctx, p, tensor_cores).candidates


class _MatmulLaunch:
    """Enqueue one run of one algorithm on the context's stream (``execute`` does not synchronise)."""

    __slots__ = ("_algorithm", "_shared", "_stream")

    def __init__(self, shared: _Matmul, algorithm: Any, stream: Any) -> None:
        self._shared, self._algorithm, self._stream = shared, algorithm, stream

    def __call__(self) -> None:
        self._shared.matmul.execute(algorithm=self._algorithm, stream=self._stream)


def _free_matmul(mm: Any) -> None:
    try:
        mm.free()
    except Exception:  # at interpreter exit CUDA may be gone already; the process is ending anyway
        pass


def _import_nvmath() -> Any:
    try:
        import nvmath.linalg.advanced as adv
    except ImportError as exc:
        raise GpuError(f"the cublaslt source needs nvmath-python: {INSTALL_HINT}") from exc
    return adv


def _operands(ctx: Any, dtype: str, shapes: GemmShapes, a: Any, b: Any, c: Any) -> tuple[Any, Any, Any, Any]:
    """The operands nvmath multiplies (transposed views where ONNX transposes) and the stream to pass.

    bfloat16 arrays are uint16 arrays of bf16 bit patterns (CuPy has no bfloat16 type); nvmath
    reads them as torch bfloat16 views, with the stream passed as a pointer.
    """
    stream: Any = ctx.stream
    if dtype == "bfloat16":
        try:
            import torch
        except ImportError as exc:
            raise UnsupportedLayer("bfloat16 cublasLt GEMMs go through torch views; torch is not installed") from exc
        try:
            a, b, c = (torch.from_dlpack(x).view(torch.bfloat16) for x in (a, b, c))
        except (RuntimeError, TypeError, BufferError) as exc:
            raise UnsupportedLayer(f"cannot view the bfloat16 operands for nvmath: {one_line(exc)}") from exc
        stream = int(ctx.stream_ptr)
    if shapes.a_transposed:  # cupy and torch both spell it swapaxes
        a = a.swapaxes(-1, -2)
    if shapes.b_transposed:
        b = b.swapaxes(-1, -2)
    return a, b, c, stream


def _attribute(read: Any) -> Any:
    """An algorithm attribute, or None where this cuBLAS version does not report it."""
    try:
        return read()
    except Exception:  # the library raises its own error types for unsupported attributes
        return None


def _name_of(alg: Any, position: int) -> str:
    algorithm_id = _attribute(lambda: alg.algorithm_id)
    if algorithm_id is None:
        return f"rank{position}"
    return algorithm_name(
        algorithm_id,
        tile=_attribute(lambda: alg.tile),
        stages=_attribute(lambda: alg.stages),
        split_k=_attribute(lambda: alg.split_k),
        reduction_scheme=_attribute(lambda: alg.reduction_scheme),
        cta_swizzling=_attribute(lambda: alg.cta_swizzling),
        custom_option=_attribute(lambda: alg.custom_option),
        cluster_shape=_attribute(lambda: alg.cluster_shape),
    )


def _workspace_of(alg: Any) -> int:
    size = _attribute(lambda: alg.algorithm.workspace_size)
    return int(size) if size is not None else 0
