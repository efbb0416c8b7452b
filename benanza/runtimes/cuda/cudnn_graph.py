"""The cuDNN graph API through ``nvidia-cudnn-frontend``: one candidate per engine configuration.

A layer becomes a small operation graph (a convolution with its fused bias and activation, a
batched matmul, a batch normalisation), the heuristics rank the engine configurations that
can run it, and every configuration that builds is a candidate. The first one of heuristic
mode A that builds is what a framework using the graph API runs without benchmarking: the
``default``. Building plans is never timed; ``launch`` only enqueues.

Verified in nvidia-cudnn-frontend 1.32's Python sources (``cudnn/_pygraph.py``,
``cudnn/__init__.py``, ``cudnn/_handle.py``, ``cudnn/graph_types.py``):

- ``cudnn.pygraph(io_data_type=, intermediate_data_type=, compute_data_type=, handle=)``;
  ``tensor(dim=, stride=, data_type=, name=)``; ``conv_fprop(image=, weight=, pre_padding=,
  post_padding=, stride=, dilation=)`` (asymmetric padding is native); grouped convolution
  is implied by the weight's channel count (``K x C/groups x ...``, the group count is
  inferred from X and W; NVIDIA/cudnn-frontend issue #114); ``bias(input=, bias=)``,
  ``relu(input, lower_clip=, upper_clip=)``, ``sigmoid``, ``tanh``, ``elu`` (no alpha
  argument: cuDNN's default 1.0), ``matmul(A, B)`` on 3-D tensors whose batch extents
  broadcast when one is 1, ``batchnorm_inference(input=, mean=, inv_variance=, scale=,
  bias=)`` (the inverse standard deviation is an input: epsilon is folded into it).
- Output layouts: only strides the caller sets are pushed to the backend (the backend
  infers NHWC for a convolution's output otherwise), so every output here gets explicit
  dims and strides.
- ``validate()``, ``build_operation_graph()``, ``create_execution_plans([heur_mode.A,
  heur_mode.FALLBACK])`` (one ranked list, duplicates of (engine, knobs) removed), then per
  index ``get_plan_name_at_index``, ``build_plan_at_index`` (raises for a plan that cannot
  build or that a note filter excluded), ``get_workspace_size_plan_at_index`` and
  ``execute_plan_at_index(variant_pack, workspace, index, handle=)``; the variant pack maps
  uids to integer device pointers, which the frontend takes as bare addresses described by
  the graph's own declarations.
- ``deselect_numeric_notes([numerical_note.TENSOR_CORE, ...])`` excludes Tensor Core
  engines; the Python API has no query for a plan's numeric notes, so with Tensor Cores
  allowed a candidate's ``tensor_cores`` is None (not known).
- ``cudnn.create_handle()`` returns a ``cudnn.Handle`` on the current device;
  ``cudnn.set_stream(handle=, stream=)`` takes the ``cudaStream_t`` as an int.
- The frontend's own Python engines for conv and matmul (``frost_conv``, ``frost_gemm``) are
  opt-in (an environment variable), so by default every plan here is a cuDNN backend engine.

NCHW is ONNX's layout and the shapes in the parameters are NCHW; the tensors are described
with NCHW dims and either NCHW-packed or NHWC-packed strides. NHWC is the graph API's
default here: its fused conv+bias+activation kernels are channels-last (NCHW-only
pointwise graphs find no engine). The layout is part of each candidate's name.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benanza.errors import GpuError, UnsupportedLayer, one_line
from benanza.runtimes.cuda.candidate import Candidate, dedupe
from benanza.runtimes.cuda.cublaslt import gemm_shapes
from benanza.runtimes.cuda.params import BatchNormParams, ConvParams, GemmParams, Shape

SOURCE = "cudnn-graph"
LAYOUTS = ("nchw", "nhwc")
HEURISTIC_MODES = ("A", "FALLBACK")
INSTALL_HINT = "pip install 'benanza[gpu]' (nvidia-cudnn-frontend, cupy)"

# benanza dtype -> cudnn.data_type names: (io, intermediate, compute). Half and bfloat16 graphs
# keep fused intermediates and accumulate in float, as the frontend's own samples do.
GRAPH_DATA_TYPES: dict[str, tuple[str, str, str]] = {
    "float32": ("FLOAT", "FLOAT", "FLOAT"),
    "float16": ("HALF", "FLOAT", "FLOAT"),
    "bfloat16": ("BFLOAT16", "FLOAT", "FLOAT"),
}

# The numeric notes that mean "Tensor Cores" (TF32 for float32 data is a down-conversion).
TENSOR_CORE_NOTES = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS")


# ------------------------------------------------------------------------ pure


def graph_data_types(dtype: str) -> tuple[str, str, str]:
    """``cudnn.data_type`` names (io, intermediate, compute) for a benanza dtype.

    Raises:
        UnsupportedLayer: a dtype the graph API is not measured in.
    """
    types = GRAPH_DATA_TYPES.get(dtype)
    if types is None:
        raise UnsupportedLayer(f"cuDNN graph API in {dtype}: benanza measures {', '.join(GRAPH_DATA_TYPES)}")
    return types


def packed_strides(dims: Sequence[int], layout: str) -> Shape:
    """Packed strides of a tensor with NCHW-ordered ``dims`` stored as ``layout``.

    ``nchw`` is row-major; ``nhwc`` stores the channel (axis 1) innermost and the spatial
    axes in order after the batch: dims (2, 3, 4, 5) give (60, 20, 5, 1) and (60, 1, 15, 3).
    """
    dims = tuple(int(d) for d in dims)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    order = storage_order(len(dims), layout)
    strides = [0] * len(dims)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= dims[axis]
    return tuple(strides)


def storage_order(ndim: int, layout: str) -> tuple[int, ...]:
    """Logical axes from outermost to innermost in memory: (0, 1, 2, 3) for NCHW, (0, 2, 3, 1) for NHWC."""
    if layout == "nhwc" and ndim >= 3:
        return (0, *range(2, ndim), 1)
    return tuple(range(ndim))


def order_of_strides(strides: Sequence[int]) -> tuple[int, ...]:
    """Axes from outermost to innermost for a packed tensor's strides (ties keep axis order)."""
    return tuple(sorted(range(len(strides)), key=lambda axis: -int(strides[axis])))


def candidate_name(layout: str, plan_name: str) -> str:
    """``<layout>:<plan name>``: one engine configuration in one layout."""
    return f"{layout}:{plan_name}"


@dataclass(frozen=True, slots=True)
class ConvGeometry:
    """A convolution as the graph API receives it: 2-D or 3-D (a 1-D convolution gets H = 1)."""

    x: Shape
    w: Shape
    y: Shape
    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def bias(self) -> Shape:
        return (1, self.w[0], *([1] * (len(self.x) - 2)))


def conv_geometry(p: ConvParams) -> ConvGeometry:
    """The graph API's view of ``p``; checks what the parameters promise against each other.

    Raises:
        UnsupportedLayer: a ConvTranspose, or shapes that do not describe one convolution.
    """
    if p.transpose:
        raise UnsupportedLayer("ConvTranspose: the cuDNN graph source measures conv_fprop only")
    n = len(p.x) - 2
    if n < 1 or n > 3 or len(p.w) != n + 2 or len(p.y) != n + 2:
        raise UnsupportedLayer(f"convolution with x {p.x}, w {p.w}, y {p.y}: not 1 to 3 spatial dimensions")
    groups = max(int(p.groups), 1)
    if p.x[1] != p.w[1] * groups or p.w[0] % groups:
        raise UnsupportedLayer(f"convolution with x {p.x}, w {p.w} and {groups} groups: channel counts disagree")
    x, w, y = tuple(p.x), tuple(p.w), tuple(p.y)
    pre, post = tuple(p.pads_begin), tuple(p.pads_end)
    stride, dilation = tuple(p.strides), tuple(p.dilations)
    if n == 1:  # cuDNN convolves 2-D and 3-D tensors: a 1-D one is 2-D with a unit height
        x, w, y = (*x[:2], 1, x[2]), (*w[:2], 1, w[2]), (*y[:2], 1, y[2])
        pre, post, stride, dilation = (0, *pre), (0, *post), (1, *stride), (1, *dilation)
    expected = [
        (x[i + 2] + pre[i] + post[i] - dilation[i] * (w[i + 2] - 1) - 1) // stride[i] + 1 for i in range(len(x) - 2)
    ]
    if list(y[2:]) != expected or y[:2] != (x[0], w[0]):
        raise UnsupportedLayer(f"convolution output {p.y} does not follow from x {p.x}, w {p.w} and its attributes")
    return ConvGeometry(x, w, y, pre, post, stride, dilation)


def activation_call(activation: str | None, coef: float = 0.0) -> tuple[str, dict[str, float]] | None:
    """The pointwise op (``pygraph`` method name and keyword arguments) of a fused activation.

    Raises:
        UnsupportedLayer: an activation the graph API cannot express as asked.
    """
    if activation in (None, "identity"):
        return None
    if activation == "relu":
        return "relu", {}
    if activation == "clipped_relu":
        return "relu", {"lower_clip": 0.0, "upper_clip": float(coef)}
    if activation in ("sigmoid", "tanh"):
        return activation, {}
    if activation == "elu":
        if float(coef) not in (0.0, 1.0):  # 0.0: the parameters' default, ONNX's alpha is 1.0
            raise UnsupportedLayer(f"ELU with alpha {coef}: the frontend's elu has cuDNN's default alpha 1.0 only")
        return "elu", {}
    raise UnsupportedLayer(f"activation {activation!r} has no cuDNN graph pointwise op in benanza")


# ------------------------------------------------------------------------ GPU


@dataclass(eq=False)
class GraphPlans:
    """One operation graph, its operand arrays and the candidates built from its plans.

    ``arrays`` hold each operand in its storage order (``storage_orders``: logical axes from
    outermost to innermost); ``logical(name)`` is the NCHW-ordered view of one of them.
    ``failures`` are the plans that did not build, with the library's reason.
    """

    graph: Any
    layout: str
    arrays: dict[str, Any]
    storage_orders: dict[str, tuple[int, ...]]
    candidates: list[Candidate] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def logical(self, name: str) -> Any:
        """Operand ``name`` as an NCHW-ordered view (no copy), the shape the parameters speak of."""
        order = self.storage_orders[name]
        return self.arrays[name].transpose([order.index(axis) for axis in range(len(order))])


@dataclass(frozen=True, slots=True)
class _Operand:
    name: str
    tensor: Any
    dims: Shape
    strides: Shape
    dtype: str
    fill: str = "random"


@dataclass(frozen=True, slots=True)
class OperationGraph:
    """A frontend graph as built on the host: its operands (inputs, then the output) and what it computes."""

    graph: Any
    operands: list[_Operand]
    what: str  # "float32 convolution", for messages


def graph_conv_candidates(
    ctx: Any, p: ConvParams, tensor_cores: bool, *, layout: str = "nhwc", modes: Sequence[str] = HEURISTIC_MODES
) -> list[Candidate]:
    """Every engine configuration of a convolution [+ bias] [+ activation] graph that builds."""
    return conv_graph_plans(ctx, p, tensor_cores, layout=layout, modes=modes).candidates


def graph_matmul_candidates(
    ctx: Any, p: GemmParams, tensor_cores: bool, *, modes: Sequence[str] = HEURISTIC_MODES
) -> list[Candidate]:
    """Every engine configuration of a batched matmul [+ bias] graph that builds."""
    return matmul_graph_plans(ctx, p, tensor_cores, modes=modes).candidates


def graph_batchnorm_candidates(
    ctx: Any,
    p: BatchNormParams,
    tensor_cores: bool = True,
    *,
    layout: str = "nhwc",
    modes: Sequence[str] = HEURISTIC_MODES,
) -> list[Candidate]:
    """Every engine configuration of an inference batch normalisation graph that builds."""
    return batchnorm_graph_plans(ctx, p, tensor_cores, layout=layout, modes=modes).candidates


def conv_graph_plans(
    ctx: Any, p: ConvParams, tensor_cores: bool, *, layout: str = "nhwc", modes: Sequence[str] = HEURISTIC_MODES
) -> GraphPlans:
    """Build the graph of ``p`` (conv_fprop, then bias and activation when fused) and its plans.

    Raises:
        UnsupportedLayer: the graph API cannot express or run the layer (the reason says which).
        GpuError: the cuDNN frontend or CuPy is missing.
    """
    _conv_layer(p, layout)  # what the graph API cannot express is refused before any library is loaded
    cudnn = _import_cudnn()
    handle = _handle(ctx, cudnn)
    g = conv_graph(cudnn, p, layout, handle)
    return _plan(ctx, cudnn, handle, g, layout, tensor_cores, modes)


def _conv_layer(p: ConvParams, layout: str) -> tuple[ConvGeometry, tuple[str, dict[str, float]] | None]:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    return conv_geometry(p), activation_call(p.activation, p.activation_coef)


def conv_graph(cudnn: Any, p: ConvParams, layout: str = "nhwc", handle: Any = None) -> OperationGraph:
    """The operation graph of ``p`` (conv_fprop, then bias and activation when fused), not yet validated.

    Host-only: building needs the frontend and libcudnn, not a GPU (``handle`` may be None).

    Raises:
        UnsupportedLayer: the graph API cannot express the layer, or the frontend infers
            another output shape than the layer's.
    """
    geo, act = _conv_layer(p, layout)
    graph, io = _new_graph(cudnn, "benanza_conv", p.dtype, handle)
    dt = cudnn.data_type
    operands: list[_Operand] = []

    def declare(name: str, dims: Shape, fill: str = "random") -> Any:
        strides = packed_strides(dims, layout)
        tensor = graph.tensor(name=name, dim=list(dims), stride=list(strides), data_type=getattr(dt, io))
        operands.append(_Operand(name, tensor, dims, strides, p.dtype, fill))
        return tensor

    x = declare("x", geo.x)
    w = declare("w", geo.w)
    out = graph.conv_fprop(
        image=x,
        weight=w,
        pre_padding=list(geo.pre_padding),
        post_padding=list(geo.post_padding),
        stride=list(geo.stride),
        dilation=list(geo.dilation),
        name="conv",
    )
    _shape_output(out, geo.y, layout, "the convolution")
    if p.bias:
        out = graph.bias(input=out, bias=declare("bias", geo.bias), name="bias")
        _shape_output(out, geo.y, layout, "the bias addition")
    if act is not None:
        op, kwargs = act
        out = getattr(graph, op)(input=out, name=op, **kwargs)
        _shape_output(out, geo.y, layout, f"the {op}")
    out.set_output(True).set_data_type(getattr(dt, io))
    operands.append(_Operand("y", out, geo.y, packed_strides(geo.y, layout), p.dtype, "zeros"))
    return OperationGraph(graph, operands, f"{p.dtype} convolution")


def matmul_graph_plans(
    ctx: Any, p: GemmParams, tensor_cores: bool, *, modes: Sequence[str] = HEURISTIC_MODES
) -> GraphPlans:
    """Build the matmul graph of ``p``: 3-D A (batch x m x k) and B (batch x k x n), a row bias.

    A shared (not batched) operand has batch extent 1 and is broadcast; a transposed operand
    is described by its strides over ONNX's stored matrix. A bias is a (1, 1, n) row added to
    the product, the Gemm's usual fully-connected bias.

    Raises:
        UnsupportedLayer: alpha other than 1, or a bias scaled by beta other than 1 (the
            cublasLt source measures those), or no engine for the graph.
    """
    _matmul_check(p)
    cudnn = _import_cudnn()
    handle = _handle(ctx, cudnn)
    g = matmul_graph(cudnn, p, handle)
    return _plan(ctx, cudnn, handle, g, "rowmajor", tensor_cores, modes)


def _matmul_check(p: GemmParams) -> None:
    if float(p.alpha) != 1.0 or (p.bias and float(p.beta) != 1.0):
        raise UnsupportedLayer(f"Gemm with alpha={p.alpha}, beta={p.beta}: the graph matmul runs alpha = beta = 1")


def matmul_graph(cudnn: Any, p: GemmParams, handle: Any = None) -> OperationGraph:
    """The batched matmul [+ row bias] graph of ``p``, not yet validated (host-only, as ``conv_graph``)."""
    _matmul_check(p)
    shapes = gemm_shapes(p)
    graph, io = _new_graph(cudnn, "benanza_matmul", p.dtype, handle)
    dt = cudnn.data_type
    batch = shapes.c[0] if shapes.batched else 1
    a_dims = (shapes.a[0] if len(shapes.a) == 3 else 1, p.m, p.k)
    b_dims = (shapes.b[0] if len(shapes.b) == 3 else 1, p.k, p.n)
    c_dims = (batch, p.m, p.n)
    a_strides = (p.m * p.k, 1, p.m) if shapes.a_transposed else (p.m * p.k, p.k, 1)
    b_strides = (p.k * p.n, 1, p.k) if shapes.b_transposed else (p.k * p.n, p.n, 1)
    operands: list[_Operand] = []

    def declare(name: str, dims: Shape, strides: Shape, fill: str = "random") -> Any:
        tensor = graph.tensor(name=name, dim=list(dims), stride=list(strides), data_type=getattr(dt, io))
        operands.append(_Operand(name, tensor, dims, strides, p.dtype, fill))
        return tensor

    out = graph.matmul(declare("a", a_dims, a_strides), declare("b", b_dims, b_strides), name="matmul")
    _shape_output(out, c_dims, "nchw", "the matmul")
    if p.bias:
        out = graph.bias(input=out, bias=declare("bias", (1, 1, p.n), (p.n, p.n, 1)), name="bias")
        _shape_output(out, c_dims, "nchw", "the bias addition")
    out.set_output(True).set_data_type(getattr(dt, io))
    operands.append(_Operand("c", out, c_dims, packed_strides(c_dims, "nchw"), p.dtype, "zeros"))
    return OperationGraph(graph, operands, f"{p.dtype} matmul")


def batchnorm_graph_plans(
    ctx: Any,
    p: BatchNormParams,
    tensor_cores: bool = True,
    *,
    layout: str = "nhwc",
    modes: Sequence[str] = HEURISTIC_MODES,
) -> GraphPlans:
    """Build an inference batch normalisation graph: y = (x - mean) * inv_std * scale + bias.

    The per-channel statistics and affine parameters are float32 tensors of shape
    (1, C, 1, 1); ``inv_std`` is 1 / sqrt(var + epsilon), computed off the graph. A 2-D or
    3-D input is given unit spatial extents to reach cuDNN's 4-D minimum.

    Raises:
        UnsupportedLayer: the graph API has no engine for it in this layout and dtype.
    """
    cudnn = _import_cudnn()
    handle = _handle(ctx, cudnn)
    g = batchnorm_graph(cudnn, p, layout, handle)
    return _plan(ctx, cudnn, handle, g, layout, tensor_cores, modes)


def batchnorm_graph(cudnn: Any, p: BatchNormParams, layout: str = "nhwc", handle: Any = None) -> OperationGraph:
    """The inference batch normalisation graph of ``p``, not yet validated (host-only, as ``conv_graph``)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    x_dims = tuple(p.x) + (1,) * max(0, 4 - len(p.x))
    if len(x_dims) > 5:
        raise UnsupportedLayer(f"batch normalisation of a {len(p.x)}-D tensor: cuDNN normalises 4-D and 5-D ones")
    graph, io = _new_graph(cudnn, "benanza_batchnorm", p.dtype, handle)
    dt = cudnn.data_type
    channel = (1, x_dims[1], *([1] * (len(x_dims) - 2)))
    operands: list[_Operand] = []

    def declare(name: str, dims: Shape, dtype: str, data_type: Any, fill: str = "random") -> Any:
        strides = packed_strides(dims, layout)
        tensor = graph.tensor(name=name, dim=list(dims), stride=list(strides), data_type=data_type)
        operands.append(_Operand(name, tensor, dims, strides, dtype, fill))
        return tensor

    x = declare("x", x_dims, p.dtype, getattr(dt, io))
    stats = {
        name: declare(name, channel, "float32", dt.FLOAT, "ones" if name == "inv_std" else "random")
        for name in ("mean", "inv_std", "scale", "bias")
    }
    y = graph.batchnorm_inference(
        input=x,
        mean=stats["mean"],
        inv_variance=stats["inv_std"],
        scale=stats["scale"],
        bias=stats["bias"],
        name="batchnorm",
    )
    _shape_output(y, x_dims, layout, "the batch normalisation")
    y.set_output(True).set_data_type(getattr(dt, io))
    operands.append(_Operand("y", y, x_dims, packed_strides(x_dims, layout), p.dtype, "zeros"))
    return OperationGraph(graph, operands, f"{p.dtype} batchnorm")


def _new_graph(cudnn: Any, name: str, dtype: str, handle: Any) -> tuple[Any, str]:
    """An empty graph with the data types of ``dtype`` (``graph_data_types``), and its I/O type's name."""
    io, intermediate, compute = graph_data_types(dtype)
    dt = cudnn.data_type
    graph = cudnn.pygraph(
        name=name,
        io_data_type=getattr(dt, io),
        intermediate_data_type=getattr(dt, intermediate),
        compute_data_type=getattr(dt, compute),
        handle=handle,
    )
    return graph, io


def _shape_output(tensor: Any, dims: Shape, layout: str, what: str) -> None:
    """Give an op's output the layer's dims in ``layout``; the frontend's own inference, where made, must agree."""
    inferred = tuple(int(d) for d in tensor.get_dim())
    if inferred and inferred != tuple(dims):
        raise UnsupportedLayer(f"the cuDNN frontend infers {what} as {list(inferred)}, the layer has {list(dims)}")
    tensor.set_dim(list(dims)).set_stride(list(packed_strides(dims, layout)))


def operand_arrays(
    ctx: Any, operands: Sequence[_Operand], bound: Mapping[str, Any] | None = None
) -> tuple[dict[str, tuple[int, ...]], dict[str, Any]]:
    """Each operand's storage order (``order_of_strides``) and array: allocated by ``ctx`` in that order, or
    the caller's (``bound``: a view into a buffer of its own, Q, K and V inside one QKV projection), which
    must be that shape, of the operand's type, with the strides the graph declares wherever an axis has
    more than one element (cuDNN reads the memory as declared, whatever the array says).

    Raises:
        GpuError: a bound array that is not what the graph describes, or a name no operand has.
    """
    bound = dict(bound or {})
    unknown = sorted(set(bound) - {op.name for op in operands})
    if unknown:
        raise GpuError(f"arrays bound to {', '.join(unknown)}: the graph has no such operand")
    orders = {op.name: order_of_strides(op.strides) for op in operands}
    arrays = {}
    for op in operands:
        dims = tuple(op.dims[axis] for axis in orders[op.name])
        given = bound.get(op.name)
        if given is None:
            arrays[op.name] = ctx.array(dims, op.dtype, op.fill)
            continue
        storage = "uint16" if op.dtype == "bfloat16" else op.dtype
        declared = tuple(op.strides[axis] for axis in orders[op.name])
        strides = tuple(int(st) // given.dtype.itemsize for st in given.strides)
        if (
            tuple(given.shape) != dims
            or str(given.dtype) != storage
            or any(n > 1 and a != d for n, a, d in zip(dims, strides, declared, strict=True))
        ):
            raise GpuError(
                f"operand {op.name} bound to a {given.dtype} array of {tuple(given.shape)} strided {strides}:"
                f" the graph declares {storage} {dims} strided {declared}"
            )
        arrays[op.name] = given
    return orders, arrays


def _plan(
    ctx: Any,
    cudnn: Any,
    handle: Any,
    g: OperationGraph,
    layout: str,
    tensor_cores: bool,
    modes: Sequence[str],
    bound: Mapping[str, Any] | None = None,
) -> GraphPlans:
    """Validate, plan and build every plan of ``g``; allocate its operands; make the candidates.

    ``bound``: operands the caller's arrays hold (views into a buffer of its own, in the operand's storage
    order: Q, K and V inside one packed QKV projection), not allocated here.
    """
    graph, operands, what = g.graph, g.operands, g.what
    try:
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([getattr(cudnn.heur_mode, mode) for mode in modes])
    except (cudnn.cudnnGraphNotSupportedError, RuntimeError, ValueError) as exc:
        raise UnsupportedLayer(f"cuDNN graph API cannot run this {what}: {one_line(exc)}") from exc
    if not tensor_cores:
        graph.deselect_numeric_notes([getattr(cudnn.numerical_note, note) for note in TENSOR_CORE_NOTES])

    orders, arrays = operand_arrays(ctx, operands, bound)
    variant_pack = {int(op.tensor.get_uid()): int(arrays[op.name].data.ptr) for op in operands}
    plans = GraphPlans(graph, layout, arrays, orders)
    built: list[Candidate] = []
    for index in range(graph.get_execution_plan_count()):
        try:
            plan_name = graph.get_plan_name_at_index(index)
        except Exception as exc:  # the frontend raises several types for one unusable entry
            plans.failures.append(f"[{index}]: {one_line(exc)}")
            continue
        try:
            graph.build_plan_at_index(index)
            workspace = int(graph.get_workspace_size_plan_at_index(index))
        except Exception as exc:  # a plan that does not build (or was deselected) is skipped, not fatal
            plans.failures.append(f"[{index}] {plan_name}: {one_line(exc)}")
            continue
        built.append(
            Candidate(
                source=SOURCE,
                name=candidate_name(layout, plan_name),
                launch=_GraphLaunch(plans, ctx, handle, variant_pack, index, workspace),
                workspace_bytes=workspace,
                tensor_cores=None if tensor_cores else False,
                heuristic_rank=index,
                default=not built,
            )
        )
    if not built:
        tried = "; ".join(plans.failures[:3]) or "the heuristics listed no plan"
        variant = "" if tensor_cores else " without Tensor Cores"
        raise UnsupportedLayer(f"no cuDNN graph plan builds for this {what}{variant}: {tried}")
    plans.candidates = dedupe(built)
    return plans


class _GraphLaunch:
    """Enqueue one plan on the handle's stream (the context's): no synchronisation."""

    __slots__ = ("_ctx", "_handle", "_index", "_plans", "_variant_pack", "_workspace")

    def __init__(self, plans: GraphPlans, ctx: Any, handle: Any, variant_pack: dict[int, int], index: int, ws: int):
        self._plans, self._ctx, self._handle = plans, ctx, handle
        self._variant_pack, self._index, self._workspace = variant_pack, index, ws

    def __call__(self) -> None:
        # Asked at launch, not at build: the context owns the scratch buffer and may grow it
        # for another candidate in between, which would leave an earlier pointer dangling.
        workspace = self._ctx.workspace(self._workspace) if self._workspace else None
        self._plans.graph.execute_plan_at_index(self._variant_pack, workspace, self._index, handle=self._handle)


def _import_cudnn() -> Any:
    """The cuDNN frontend's module, bound to the libcudnn the legacy source loads.

    The frontend looks for libcudnn itself and misses a wheel reached through PYTHONPATH or
    ``pip install --target``; loading benanza's copy first (globally) lets it find that one,
    and keeps one cuDNN in the process.
    """
    from benanza.runtimes.cuda import cudnn_legacy

    try:
        cudnn_legacy.cudnn_library_path()
    except GpuError:  # the frontend may still find one of its own; its error says so if not
        pass
    try:
        import cudnn
    except (ImportError, OSError, RuntimeError) as exc:  # the frontend loads libcudnn at import
        raise GpuError(f"the cudnn-graph source needs nvidia-cudnn-frontend: {INSTALL_HINT} ({one_line(exc)})") from exc
    return cudnn


_HANDLES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _handle(ctx: Any, cudnn: Any) -> Any:
    """The context's cuDNN handle (one per context, created on its device), bound to its stream."""
    try:
        handle = _HANDLES.get(ctx)
    except TypeError:  # a context that cannot be weakly referenced gets a handle per graph
        handle = None
    if handle is None:
        handle = _new_handle(ctx, cudnn)
        try:
            _HANDLES[ctx] = handle
            weakref.finalize(ctx, _destroy_handle, cudnn, handle)
        except TypeError:
            pass
    return handle


def _new_handle(ctx: Any, cudnn: Any) -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise GpuError(f"the cudnn-graph source needs CuPy: {INSTALL_HINT}") from exc
    with cupy.cuda.Device(int(getattr(ctx, "ordinal", 0))):
        handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=int(ctx.stream_ptr))
    return handle


def _destroy_handle(cudnn: Any, handle: Any) -> None:
    try:
        cudnn.destroy_handle(handle)
    except Exception:  # at interpreter exit the driver may be gone; nothing is left to release
        pass
