"""Element-wise and data-movement layers as a framework's kernels run them, through CuPy.

cuDNN and cuBLAS do not run Add, Gelu, Concat, Transpose and the like: a framework launches
its own kernels for them. Benanza measures those layers with CuPy's: one element-wise kernel
per ONNX op with NumPy broadcasting, writing into a preallocated output on the context's
stream. Each layer has exactly one candidate (source ``cupy``), the default.

A layer becomes a ``LayerCall`` first, a pure description: the arrays it reads
(``InputSpec``), the arrays it writes, and ``run(ops, inputs, outputs)``, written against an
array module (``ArrayOps.xp``), so the same code runs on NumPy arrays in the CPU tests and
on CuPy arrays on the device. Ops that are one NumPy ufunc (Add, Exp, Equal, Clip, ...) run
as that ufunc with ``out=``. Ops that NumPy spells as several ufuncs (LeakyRelu, PRelu,
HardSigmoid, HardSwish, Gelu, Where) carry a ``FusedKernel`` as well: on the device they run
as one ``cupy.ElementwiseKernel``, one kernel per op as frameworks launch them, and ``run``
is the reference the GPU tests compare it with.

Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout at inference) change only
metadata: they launch nothing, cost nothing on the GPU, and get no candidate at all.

Reductions (ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd) are CuPy's reduction
routines: one kernel each. QuantizeLinear and DequantizeLinear are one fused element-wise
kernel each, as ONNX Runtime's CUDA provider runs them. LayerNormalization and
RMSNormalization are one ``RowKernel`` each (a ``cupy.RawKernel``): a block per row takes the
row's mean and deviations in one pass (Welford's), then writes the normalised, scaled row;
PyTorch and ONNX Runtime launch one kernel per normalisation likewise. Its ``run`` is the reference the GPU tests
compare it with.

What the parameters do not carry is chosen, and noted on the candidate: a constant operand
the model stores as a small value (``x * 0.5``) is a scalar; Slice and Pad bounds given as
inputs (opset >= 10 / 11) are inferred from the shapes (a prefix slice, padding at the end),
which moves the same bytes; Gather's indices are random in range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benanza.errors import GpuError, UnsupportedLayer
from benanza.runtimes.cuda.candidate import Candidate
from benanza.runtimes.cuda.params import (
    QUANTIZED_RANGES,
    BlockQuantizedGemmParams,
    DataMovementParams,
    ElementwiseParams,
    FrameworkParams,
    NormalizationParams,
    ReductionParams,
    Shape,
)

SOURCE = "cupy"
INSTALL_HINT = "pip install 'benanza[gpu]' (cupy)"

# ONNX TensorProto.DataType -> NumPy dtype name (Cast's ``to``).
ONNX_DTYPES: dict[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
}

Run = Callable[["ArrayOps", Sequence[Any], Sequence[Any]], None]


@dataclass(frozen=True, slots=True)
class ArrayOps:
    """An array module and the special functions NumPy itself lacks.

    ``erf(x, out)`` writes erf(x) into ``out``: ``cupyx.scipy.special.erf`` on the device,
    SciPy's or a ``math.erf`` loop on the CPU.
    """

    xp: Any
    erf: Callable[[Any, Any], Any]


def numpy_ops() -> ArrayOps:
    """NumPy, for the CPU tests and for references."""
    try:
        from scipy.special import erf as scipy_erf
    except ImportError:
        scipy_erf = None

    def erf(x: Any, out: Any) -> Any:
        if scipy_erf is not None:
            return scipy_erf(x, out=out)
        out[...] = np.vectorize(math.erf, otypes=[np.float64])(x)
        return out

    return ArrayOps(np, erf)


def cupy_ops() -> ArrayOps:
    """CuPy, on the device."""
    cupy = _import_cupy()
    from cupyx.scipy.special import erf

    return ArrayOps(cupy, lambda x, out: erf(x, out=out))


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One array a layer reads or writes; ``index_bound``: integer indices drawn from [0, bound); ``value``:
    every element that value (a length: the whole work, as the model's own run computes it)."""

    shape: Shape
    dtype: str
    index_bound: int | None = None
    value: int | None = None


@dataclass(frozen=True, slots=True)
class FusedKernel:
    """A ``cupy.ElementwiseKernel``: its parameter lists, body, name and the scalars passed after the arrays."""

    in_params: str
    out_params: str
    operation: str
    name: str
    preamble: str = ""
    scalars: tuple[float | int, ...] = ()


@dataclass(frozen=True, slots=True)
class RowKernel:
    """A ``cupy.RawKernel``: its CUDA source and name, launch shape, and the scalars passed after the
    arrays (inputs, then outputs) as ``(NumPy type, value)``."""

    source: str
    name: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    scalars: tuple[tuple[str, float | int], ...] = ()


@dataclass(frozen=True, slots=True)
class LayerCall:
    """What one layer runs: the arrays it reads and writes and how, on any array module.

    On the device the call runs ``fused`` or ``raw`` where it has one (``run`` is then the
    reference), else ``run`` on CuPy arrays."""

    op: str
    kernel: str  # what runs, for the candidate's name: "add", "concatenate", "benanza_gelu", ...
    inputs: tuple[InputSpec, ...]
    outputs: tuple[InputSpec, ...]
    run: Run = field(compare=False, repr=False)
    fused: FusedKernel | None = None
    notes: tuple[str, ...] = ()
    raw: RowKernel | None = None


# ------------------------------------------------------------------------ registry

CallBuilder = Callable[[Any, dict[str, Any]], LayerCall]
ELEMENTWISE: dict[str, CallBuilder] = {}
MOVEMENT: dict[str, CallBuilder] = {}
REDUCTION: dict[str, CallBuilder] = {}
NORMALIZATION: dict[str, CallBuilder] = {}


def _registrar(table: dict[str, CallBuilder]) -> Callable[..., Callable[[CallBuilder], CallBuilder]]:
    def register(*ops: str) -> Callable[[CallBuilder], CallBuilder]:
        def decorate(fn: CallBuilder) -> CallBuilder:
            for op in ops:
                table[op] = fn
            return fn

        return decorate

    return register


register_elementwise = _registrar(ELEMENTWISE)  # the builder of one or more element-wise ops' ``LayerCall``
register_movement = _registrar(MOVEMENT)  # the builder of one or more data-movement ops' ``LayerCall``
register_reduction = _registrar(REDUCTION)
register_normalization = _registrar(NORMALIZATION)
QUANTIZED_GEMM: dict[str, CallBuilder] = {}
register_quantized_gemm = _registrar(QUANTIZED_GEMM)

# which table holds the builders of a kind of parameters, and what the kind is called in messages
_TABLES: dict[type, tuple[dict[str, CallBuilder], str]] = {
    ElementwiseParams: (ELEMENTWISE, "element-wise"),
    DataMovementParams: (MOVEMENT, "data-movement"),
    ReductionParams: (REDUCTION, "reduction"),
    NormalizationParams: (NORMALIZATION, "normalization"),
    BlockQuantizedGemmParams: (QUANTIZED_GEMM, "quantized GEMM"),
}


def layer_call(p: FrameworkParams) -> LayerCall | None:
    """The call of one layer, or None for a view (no kernel at all).

    Raises:
        UnsupportedLayer: an op with no CuPy mapping here (the message names it), or one whose
            parameters do not describe a call this module can reproduce exactly.
    """
    if isinstance(p, DataMovementParams) and p.view:
        return None
    table, kind = _TABLES[type(p)]
    build = table.get(p.op)
    if build is None:
        raise UnsupportedLayer(f"{p.op} has no CuPy {kind} kernel in benanza (known: {', '.join(sorted(table))})")
    if p.dtype == "bfloat16":
        raise UnsupportedLayer(f"{p.op} in bfloat16: CuPy has no bfloat16 arithmetic")
    attributes = p.attributes if isinstance(p, ElementwiseParams | DataMovementParams) else ()
    return build(p, dict(attributes))


# ------------------------------------------------------------------------ element-wise

_UNARY = {
    "Abs": "absolute",
    "Neg": "negative",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Reciprocal": "reciprocal",
    "Ceil": "ceil",
    "Floor": "floor",
    "Sin": "sin",
    "Cos": "cos",
    "Sign": "sign",
    "Not": "logical_not",
    "Tan": "tan",
    "Asin": "arcsin",
    "Acos": "arccos",
    "Atan": "arctan",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Asinh": "arcsinh",
    "Acosh": "arccosh",
    "Atanh": "arctanh",
    "Round": "rint",  # ONNX rounds half to even, as rint does
}
_BINARY = {
    "Add": "add",
    "Sub": "subtract",
    "Mul": "multiply",
    "Div": "true_divide",
    "Pow": "power",
    "Equal": "equal",
    "Less": "less",
    "Greater": "greater",
    "LessOrEqual": "less_equal",
    "GreaterOrEqual": "greater_equal",
    "And": "logical_and",
    "Or": "logical_or",
    "Xor": "logical_xor",
    "Mod": "remainder",  # the divisor's sign (integers); fmod=1: the dividend's (``fmod``)
}
_COMPARISONS = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
# The constant a binary op gets when the model stores its second operand as a small value
# (absent from the parameters): any value costs the same, these keep results finite.
_SCALAR_OPERAND = {
    **{"Add": 1.0, "Sub": 1.0, "Mul": 0.5, "Div": 2.0, "Pow": 2.0, "Mod": 3.0},
    **{"And": True, "Or": True, "Xor": True},
}
_VARIADIC = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add", "BiasAdd": "add"}  # BiasAdd: ORT's


def _accumulator(dtype: str) -> str:
    """The C type a fused kernel computes in: double for float64, float otherwise."""
    return "double" if dtype == "float64" else "float"


def _math(dtype: str) -> dict[str, str]:
    """The CUDA math functions of the type a fused kernel computes in (float's carry an ``f``)."""
    suffix = "" if dtype == "float64" else "f"
    return {name: f"{name}{suffix}" for name in ("exp", "expm1", "log1p", "tanh", "fabs", "erf", "rint")}


def _fused(name: str, dtype: str, in_params: str, operation: str, scalars: tuple[float, ...] = ()) -> FusedKernel:
    return FusedKernel(in_params, "T y", operation, f"benanza_{name}", f"typedef {_accumulator(dtype)} A;", scalars)


@register_elementwise(*_UNARY)
def _unary(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    name = _UNARY[p.op]
    (x,) = _exact_inputs(p, 1)

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        getattr(ops.xp, name)(inputs[0], out=outputs[0])

    return LayerCall(p.op, name, (x,), (InputSpec(p.y, p.dtype),), run)


@register_elementwise(*_BINARY)
def _binary(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    name = "fmod" if p.op == "Mod" and int(attrs.get("fmod", 0)) else _BINARY[p.op]
    out_dtype = "bool" if p.op in _COMPARISONS else p.dtype
    notes: tuple[str, ...] = ()
    if len(p.inputs) == 1:
        scalar = _SCALAR_OPERAND.get(p.op, 0.0)
        if np.dtype(p.dtype).kind in "iu" and not isinstance(scalar, bool):
            scalar = 1  # an integer operand for integer data (any value costs the same)
        notes = (f"constant operand as the scalar {scalar}",)
        specs = (InputSpec(p.inputs[0], p.dtype),)

        def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
            getattr(ops.xp, name)(inputs[0], scalar, out=outputs[0])

    else:
        specs = _exact_inputs(p, 2)

        def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
            getattr(ops.xp, name)(inputs[0], inputs[1], out=outputs[0])

    return LayerCall(p.op, name, specs, (InputSpec(p.y, out_dtype),), run, notes=notes)


@register_elementwise(*_VARIADIC)
def _variadic(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    name = _VARIADIC[p.op]
    specs = tuple(InputSpec(s, p.dtype) for s in p.inputs)
    if not specs:
        raise UnsupportedLayer(f"{p.op} without known input shapes")
    mean = p.op == "Mean"

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp, out = ops.xp, outputs[0]
        if len(inputs) == 1:
            xp.copyto(out, inputs[0])
            return
        fn = getattr(xp, name)
        fn(inputs[0], inputs[1], out=out)
        for x in inputs[2:]:
            fn(out, x, out=out)
        if mean:
            xp.multiply(out, 1.0 / len(inputs), out=out)

    return LayerCall(
        p.op, name + ("+multiply" if mean and len(specs) > 1 else ""), specs, (InputSpec(p.y, p.dtype),), run
    )


@register_elementwise("Erf")
def _erf(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    specs = _exact_inputs(p, 1)

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.erf(inputs[0], outputs[0])

    return LayerCall(p.op, "erf", specs, (InputSpec(p.y, p.dtype),), run)


@register_elementwise("Softplus")
def _softplus(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    specs = _exact_inputs(p, 1)

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.logaddexp(inputs[0], 0.0, out=outputs[0])  # log(exp(x) + 1), one overflow-safe ufunc

    return LayerCall(p.op, "logaddexp", specs, (InputSpec(p.y, p.dtype),), run)


@register_elementwise("CumSum")
def _cumsum(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    specs = _exact_inputs(p, 1)
    if attrs.get("exclusive") or attrs.get("reverse"):
        raise UnsupportedLayer("CumSum exclusive or reversed: CuPy's cumsum runs the plain running sum")
    axis = int(attrs["axis"])

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.cumsum(inputs[0], axis=axis, out=outputs[0])

    return LayerCall(p.op, "cumsum", specs, (InputSpec(p.y, p.dtype),), run)


@register_elementwise("Cast")
def _cast(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    specs = _exact_inputs(p, 1)
    to = ONNX_DTYPES.get(int(attrs.get("to", 1)))
    if to is None or to == "bfloat16":
        raise UnsupportedLayer(f"Cast to ONNX type {attrs.get('to')}: no CuPy dtype for it")

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.copyto(outputs[0], inputs[0], casting="unsafe")

    return LayerCall(p.op, f"copy-to-{to}", specs, (InputSpec(p.y, to),), run)


@register_elementwise("Clip")
def _clip(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    specs = _exact_inputs(p, 1)
    low, high = attrs.get("min"), attrs.get("max")

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp, x, out = ops.xp, inputs[0], outputs[0]
        if low is not None and high is not None:
            xp.clip(x, low, high, out=out)
        elif low is not None:
            xp.maximum(x, low, out=out)
        elif high is not None:
            xp.minimum(x, high, out=out)
        else:
            xp.copyto(out, x)

    kernel = {(True, True): "clip", (True, False): "maximum", (False, True): "minimum"}.get(
        (low is not None, high is not None), "copy"
    )
    return LayerCall(p.op, kernel, specs, (InputSpec(p.y, p.dtype),), run)


@register_elementwise("LeakyRelu")
def _leaky_relu(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    specs = _exact_inputs(p, 1)
    alpha = float(attrs.get("alpha", 0.01))

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp, x, out = ops.xp, inputs[0], outputs[0]
        xp.multiply(x, alpha, out=out)
        (xp.maximum if alpha <= 1.0 else xp.minimum)(out, x, out=out)  # x for x >= 0, alpha * x below

    fused = _fused(
        "leaky_relu", p.dtype, "T x, float64 alpha", "A v = (A)x; y = (T)(v >= (A)0 ? v : v * (A)alpha);", (alpha,)
    )
    return LayerCall(p.op, fused.name, specs, (InputSpec(p.y, p.dtype),), run, fused)


@register_elementwise("PRelu")
def _prelu(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    specs = _exact_inputs(p, 2)

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp, (x, slope), out = ops.xp, inputs, outputs[0]
        xp.multiply(x, slope, out=out)
        xp.copyto(out, x, where=xp.greater_equal(x, 0))

    fused = _fused("prelu", p.dtype, "T x, T s", "A v = (A)x; y = (T)(v < (A)0 ? v * (A)s : v);")
    return LayerCall(p.op, fused.name, specs, (InputSpec(p.y, p.dtype),), run, fused)


@register_elementwise("HardSigmoid")
def _hard_sigmoid(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    specs = _exact_inputs(p, 1)
    alpha, beta = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp, out = ops.xp, outputs[0]
        xp.multiply(inputs[0], alpha, out=out)
        xp.add(out, beta, out=out)
        xp.clip(out, 0.0, 1.0, out=out)

    fused = _fused(
        "hard_sigmoid",
        p.dtype,
        "T x, float64 alpha, float64 beta",
        "A v = (A)alpha * (A)x + (A)beta; y = (T)(v < (A)0 ? (A)0 : (v > (A)1 ? (A)1 : v));",
        (alpha, beta),
    )
    return LayerCall(p.op, fused.name, specs, (InputSpec(p.y, p.dtype),), run, fused)


@register_elementwise("HardSwish")
def _hard_swish(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    specs = _exact_inputs(p, 1)

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp, x, out = ops.xp, inputs[0], outputs[0]
        xp.multiply(x, 1.0 / 6.0, out=out)
        xp.add(out, 0.5, out=out)
        xp.clip(out, 0.0, 1.0, out=out)
        xp.multiply(out, x, out=out)

    fused = _fused(
        "hard_swish",
        p.dtype,
        "T x",
        "A v = (A)x; A h = v / (A)6 + (A)0.5; h = h < (A)0 ? (A)0 : (h > (A)1 ? (A)1 : h); y = (T)(v * h);",
    )
    return LayerCall(p.op, fused.name, specs, (InputSpec(p.y, p.dtype),), run, fused)


@register_elementwise("Gelu", "FastGelu", "BiasGelu")
def _gelu(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    """Gelu (erf's, or tanh's approximation), and ONNX Runtime's Gelu of ``x + bias`` in the same
    kernel: FastGelu (tanh's; its bias optional) and BiasGelu (erf's)."""
    approximate = {"FastGelu": "tanh", "BiasGelu": "none"}.get(p.op) or str(attrs.get("approximate", "none"))
    if approximate not in ("none", "tanh"):
        raise UnsupportedLayer(f"Gelu with approximate={approximate!r}")
    specs = _exact_inputs(p, {"Gelu": 1, "BiasGelu": 2}.get(p.op, min(max(len(p.inputs), 1), 2)))
    biased = len(specs) == 2
    rsqrt2, k = 1.0 / math.sqrt(2.0), math.sqrt(2.0 / math.pi)

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp, out = ops.xp, outputs[0]
        x = inputs[0] + inputs[1] if biased else inputs[0]
        if approximate == "tanh":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            xp.multiply(x, x, out=out)
            xp.multiply(out, x, out=out)
            xp.multiply(out, 0.044715, out=out)
            xp.add(out, x, out=out)
            xp.multiply(out, k, out=out)
            xp.tanh(out, out=out)
        else:  # 0.5 x (1 + erf(x / sqrt(2)))
            xp.multiply(x, rsqrt2, out=out)
            ops.erf(out, out)
        xp.add(out, 1.0, out=out)
        xp.multiply(out, x, out=out)
        xp.multiply(out, 0.5, out=out)

    fn = _math(p.dtype)
    value = "A v = (A)x + (A)b;" if biased else "A v = (A)x;"
    if approximate == "tanh":
        body = f"{value} y = (T)((A)0.5 * v * ((A)1 + {fn['tanh']}((A){k!r} * (v + (A)0.044715 * v * v * v))));"
    else:
        body = f"{value} y = (T)((A)0.5 * v * ((A)1 + {fn['erf']}(v * (A){rsqrt2!r})));"
    name = f"gelu_{approximate}{'_bias' if biased else ''}"
    fused = _fused(name, p.dtype, "T x, T b" if biased else "T x", body)
    return LayerCall(p.op, fused.name, specs, (InputSpec(p.y, p.dtype),), run, fused)


# Activations of one input computed in one fused kernel: (the reference on NumPy or CuPy, the kernel's
# body with the accumulator's math functions as {exp} ... and each attribute as {name}, the attributes
# with ONNX's defaults).
_POINTWISE: dict[str, tuple[Callable[..., Any], str, dict[str, float]]] = {
    "Mish": (
        lambda xp, x: x * xp.tanh(xp.logaddexp(x, 0.0)),
        "A v = (A)x; y = (T)(v * {tanh}({log1p}({exp}(v))));",
        {},
    ),
    "Selu": (
        lambda xp, x, alpha, gamma: gamma * xp.where(x > 0, x, alpha * xp.expm1(x)),
        "A v = (A)x; y = (T)((A){gamma} * (v > (A)0 ? v : (A){alpha} * {expm1}(v)));",
        {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
    ),
    "Celu": (
        lambda xp, x, alpha: xp.maximum(x, 0.0) + xp.minimum(0.0, alpha * xp.expm1(x / alpha)),
        "A v = (A)x; A e = (A){alpha} * {expm1}(v / (A){alpha});"
        " y = (T)((v > (A)0 ? v : (A)0) + (e < (A)0 ? e : (A)0));",
        {"alpha": 1.0},
    ),
    "ThresholdedRelu": (
        lambda xp, x, alpha: xp.where(x > alpha, x, 0.0),
        "A v = (A)x; y = (T)(v > (A){alpha} ? v : (A)0);",
        {"alpha": 1.0},
    ),
    "Shrink": (
        lambda xp, x, bias, lambd: xp.where(x < -lambd, x + bias, xp.where(x > lambd, x - bias, 0.0)),
        "A v = (A)x; y = (T)(v < -(A){lambd} ? v + (A){bias} : (v > (A){lambd} ? v - (A){bias} : (A)0));",
        {"bias": 0.0, "lambd": 0.5},
    ),
    "Softsign": (lambda xp, x: x / (1.0 + xp.abs(x)), "A v = (A)x; y = (T)(v / ((A)1 + {fabs}(v)));", {}),
    # ONNX Runtime's x * sigmoid(alpha * x)
    "QuickGelu": (
        lambda xp, x, alpha: x / (1.0 + xp.exp(-alpha * x)),
        "A v = (A)x; y = (T)(v / ((A)1 + {exp}(-(A){alpha} * v)));",
        {"alpha": 1.702},
    ),
}


@register_elementwise(*_POINTWISE)
def _pointwise(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    reference, body, defaults = _POINTWISE[p.op]
    values = {name: float(attrs.get(name, default)) for name, default in defaults.items()}
    specs = _exact_inputs(p, 1)

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.copyto(outputs[0], reference(ops.xp, inputs[0], **values), casting="unsafe")

    operation = body.format(**_math(p.dtype), **{name: repr(v) for name, v in values.items()})
    fused = _fused(p.op.lower(), p.dtype, "T x", operation)
    return LayerCall(p.op, fused.name, specs, (InputSpec(p.y, p.dtype),), run, fused)


def rope(x: Any, cos: Any, sin: Any, interleaved: bool, out: Any = None) -> Any:
    """Rotary position embedding of ``x`` (..., dim): its first ``2 * cos.shape[-1]`` values rotated in pairs
    (neighbours when ``interleaved``, else the two halves) by ``cos`` and ``sin``, which broadcast over those
    pairs; the rest copied. Written into ``out`` (a new array by default)."""
    half = cos.shape[-1]
    if out is None:
        out = x.copy()
    else:
        out[..., 2 * half :] = x[..., 2 * half :]
    first, second = (
        (slice(0, 2 * half, 2), slice(1, 2 * half, 2)) if interleaved else (slice(0, half), slice(half, 2 * half))
    )
    x1, x2 = x[..., first], x[..., second]
    rotated = x1 * cos - x2 * sin  # both read before either is written (``out`` may be ``x``)
    out[..., second] = x2 * cos + x1 * sin
    out[..., first] = rotated
    return out


@register_elementwise("RotaryEmbedding")
def _rotary_embedding(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    """ONNX's RotaryEmbedding (opset 23) and ONNX Runtime's: ``x`` (batch, seq, heads * dim) or (batch, heads,
    seq, dim) rotated at its positions: the caches' rows at ``position_ids`` (batch, seq), from an offset (ONNX
    Runtime's (1,) form), or caches already (batch, seq, half) (ONNX's without ids). As CuPy's element-wise
    kernels: frameworks run it as one kernel, so this bounds it from above."""
    names = attrs["inputs"]
    shape = dict(zip(names, p.inputs, strict=True))
    heads, positions = attrs["heads"], attrs["positions"]
    bound = shape["cos"][0] - (shape["x"][1] if len(shape["x"]) == 3 else shape["x"][2]) + 1
    specs = tuple(
        InputSpec(s, "int64", index_bound=shape["cos"][0] if positions == "ids" else bound)
        if n == "pos"
        else InputSpec(s, p.dtype)
        for n, s in shape.items()
    )

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp, a = ops.xp, dict(zip(names, inputs, strict=True))
        x, y = a["x"], outputs[0]
        if x.ndim == 4:  # (batch, heads, seq, dim): seen as (batch, seq, heads, dim)
            x4, y4 = x.transpose(0, 2, 1, 3), y.transpose(0, 2, 1, 3)
        else:
            x4, y4 = (t.reshape(t.shape[0], t.shape[1], heads, -1) for t in (x, y))
        seq = x4.shape[1]
        cos, sin = a["cos"], a["sin"]
        if positions == "ids":
            cos, sin = cos[a["pos"]], sin[a["pos"]]  # (batch, seq, half)
        elif positions == "offset":
            rows = a["pos"].reshape(()) + xp.arange(seq)
            cos, sin = cos[rows][None], sin[rows][None]
        rope(x4, cos[:, :, None, :], sin[:, :, None, :], attrs["interleaved"], out=y4)

    return LayerCall(
        p.op,
        "rotary_embedding",
        specs,
        (InputSpec(p.y, p.dtype),),
        run,
        notes=("the cos/sin rows gathered, then the rotation as CuPy's element-wise kernels (a framework runs one)",),
    )


@register_elementwise("Where")
def _where(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    if len(p.inputs) != 3:
        raise UnsupportedLayer(f"Where with {len(p.inputs)} known inputs: which one is the condition is unknown")
    # the parameters' dtype is the data's (the output's: ``params._OUTPUT_TYPED``); the condition is bool
    specs = (InputSpec(p.inputs[0], "bool"), InputSpec(p.inputs[1], p.dtype), InputSpec(p.inputs[2], p.dtype))

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp, (condition, x, y), out = ops.xp, inputs, outputs[0]
        xp.copyto(out, y)
        xp.copyto(out, x, where=condition)

    fused = FusedKernel("bool c, T x, T z", "T y", "y = c ? x : z;", "benanza_where")
    return LayerCall(p.op, fused.name, specs, (InputSpec(p.y, p.dtype),), run, fused)


@register_elementwise("IsNaN", "IsInf")
def _is_special(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    (x,) = _exact_inputs(p, 1)
    if p.op == "IsInf" and not (attrs.get("detect_positive", 1) and attrs.get("detect_negative", 1)):
        raise UnsupportedLayer("IsInf of one sign only: CuPy's isinf tests both")
    name = "isnan" if p.op == "IsNaN" else "isinf"

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        getattr(ops.xp, name)(inputs[0], out=outputs[0])

    return LayerCall(p.op, name, (x,), (InputSpec(p.y, "bool"),), run)


@register_elementwise("QuantizeLinear", "DequantizeLinear")
def _quantization(p: ElementwiseParams, attrs: dict[str, Any]) -> LayerCall:
    """``inputs``: data, scale, zero point (``params._quantization``); rounding half to even, as ONNX says."""
    quantized = str(attrs["quantized"])
    low, high = QUANTIZED_RANGES[quantized]
    x, scale, zero = p.inputs
    acc, rint = _accumulator(p.dtype), _math(p.dtype)["rint"]
    if p.op == "QuantizeLinear":
        specs = (InputSpec(x, p.dtype), InputSpec(scale, p.dtype), InputSpec(zero, quantized))
        out = InputSpec(p.y, quantized)

        def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
            xp, (data, s, z) = ops.xp, inputs
            v = xp.rint(xp.true_divide(data, s)) + z
            xp.copyto(outputs[0], xp.clip(v, low, high), casting="unsafe")

        operation = (
            f"A v = {rint}((A)x / (A)s) + (A)z; "
            f"y = (Z)(v < (A)({low}) ? (A)({low}) : (v > (A)({high}) ? (A)({high}) : v));"
        )
        fused = FusedKernel("T x, T s, Z z", "Z y", operation, "benanza_quantize_linear", f"typedef {acc} A;")
    else:
        specs = (InputSpec(x, quantized), InputSpec(scale, p.dtype), InputSpec(zero, quantized))
        out = InputSpec(p.y, p.dtype)

        def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
            xp, (data, s, z) = ops.xp, inputs
            v = (data.astype(outputs[0].dtype) - z.astype(outputs[0].dtype)) * s
            xp.copyto(outputs[0], v, casting="unsafe")

        operation = "y = (T)(((A)x - (A)z) * (A)s);"
        fused = FusedKernel("Z x, T s, Z z", "T y", operation, "benanza_dequantize_linear", f"typedef {acc} A;")
    return LayerCall(p.op, fused.name, specs, (out,), run, fused)


def _exact_inputs(p: ElementwiseParams | DataMovementParams, n: int) -> tuple[InputSpec, ...]:
    if len(p.inputs) != n:
        raise UnsupportedLayer(f"{p.op} with {len(p.inputs)} known input shapes, expected {n}")
    return tuple(InputSpec(s, p.dtype) for s in p.inputs)


# ------------------------------------------------------------------------ data movement


def _axis(value: Any, ndim: int, op: str) -> int:
    axis = int(value)
    axis = axis + ndim if axis < 0 else axis
    if not 0 <= axis < max(ndim, 1):
        raise UnsupportedLayer(f"{op} axis {value} out of range for rank {ndim}")
    return axis


@register_movement("Concat")
def _concat(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    if not p.inputs:
        raise UnsupportedLayer("Concat without known input shapes")
    axis = _axis(attrs.get("axis", 0), len(p.y), p.op)
    if sum(s[axis] for s in p.inputs) != p.y[axis]:
        raise UnsupportedLayer(f"Concat of {list(p.inputs)} does not make {p.y}: a constant input is not in the params")
    specs = tuple(InputSpec(s, p.dtype) for s in p.inputs)

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.concatenate(list(inputs), axis=axis, out=outputs[0])

    return LayerCall(p.op, "concatenate", specs, (InputSpec(p.y, p.dtype),), run)


@register_movement("Transpose")
def _transpose(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    (x,) = _exact_inputs(p, 1)
    perm = tuple(int(a) for a in (attrs.get("perm") or reversed(range(len(x.shape)))))
    if sorted(perm) != list(range(len(x.shape))) or tuple(x.shape[a] for a in perm) != tuple(p.y):
        raise UnsupportedLayer(f"Transpose perm {list(perm)} of {x.shape} does not give {p.y}")

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.copyto(outputs[0], inputs[0].transpose(perm))  # transpose is a view: the copy is the kernel

    return LayerCall(p.op, "copy-transposed", (x,), (InputSpec(p.y, p.dtype),), run)


@register_movement("Slice")
def _slice(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    (x,) = _exact_inputs(p, 1)
    notes: tuple[str, ...] = ()
    if "starts" in attrs and "ends" in attrs:  # opset < 10: bounds are attributes
        index = [slice(None)] * len(x.shape)
        axes = attrs.get("axes") or range(len(attrs["starts"]))
        steps = attrs.get("steps") or [1] * len(attrs["starts"])
        for axis, start, end, step in zip(axes, attrs["starts"], attrs["ends"], steps, strict=True):
            index[_axis(axis, len(x.shape), p.op)] = slice(int(start), int(end), int(step))
    else:
        if any(o > i for o, i in zip(p.y, x.shape, strict=True)) or len(p.y) != len(x.shape):
            raise UnsupportedLayer(f"Slice of {x.shape} giving {p.y}")
        index = [slice(0, o) for o in p.y]
        notes = ("bounds are inputs: a prefix slice of the output's extent",)
    key = tuple(index)
    if np.empty(x.shape, dtype=np.bool_)[key].shape != tuple(p.y):
        raise UnsupportedLayer(f"Slice {attrs} of {x.shape} does not give {p.y}")

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.copyto(outputs[0], inputs[0][key])

    return LayerCall(p.op, "copy-sliced", (x,), (InputSpec(p.y, p.dtype),), run, notes=notes)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@register_movement("Pad")
def _pad(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    (x,) = _exact_inputs(p, 1)
    n = len(x.shape)
    mode = str(attrs.get("mode", "constant"))
    if mode not in _PAD_MODES or len(p.y) != n:
        raise UnsupportedLayer(f"Pad mode {mode!r} of {x.shape} to {p.y}")
    notes: tuple[str, ...] = ()
    if attrs.get("pads"):  # opset < 11
        pads = [int(v) for v in attrs["pads"]]
        begin, end = pads[:n], pads[n:]
    else:
        begin, end = [0] * n, [o - i for o, i in zip(p.y, x.shape, strict=True)]
        notes = ("pads are inputs: all padding at the end of each axis",)
    if any(v < 0 for v in begin + end) or [i + b + e for i, b, e in zip(x.shape, begin, end, strict=True)] != list(p.y):
        raise UnsupportedLayer(f"Pad of {x.shape} by {begin}/{end} does not give {p.y} (cropping is not supported)")
    value = float(attrs.get("value", 0.0) or 0.0)
    inner = tuple(slice(b, b + i) for b, i in zip(begin, x.shape, strict=True))
    width = tuple(zip(begin, end, strict=True))

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp, out = ops.xp, outputs[0]
        if mode == "constant":
            out.fill(value)
            xp.copyto(out[inner], inputs[0])
        else:
            xp.copyto(out, xp.pad(inputs[0], width, mode=_PAD_MODES[mode]))

    return LayerCall(p.op, f"pad-{mode}", (x,), (InputSpec(p.y, p.dtype),), run, notes=notes)


@register_movement("Gather")
def _gather(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    if not p.inputs:
        raise UnsupportedLayer("Gather without a known data shape")
    x = p.inputs[0]
    axis = _axis(attrs.get("axis", 0), len(x), p.op)
    rank = len(p.y) - len(x) + 1
    indices = tuple(p.inputs[1]) if len(p.inputs) > 1 else tuple(p.y[axis : axis + rank])
    if rank < 0 or (*x[:axis], *indices, *x[axis + 1 :]) != tuple(p.y):
        raise UnsupportedLayer(f"Gather of {x} along {axis} does not give {p.y}")
    specs = (InputSpec(x, p.dtype), InputSpec(indices, "int64", index_bound=x[axis]))

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.take(inputs[0], inputs[1], axis=axis, out=outputs[0])

    return LayerCall(p.op, "take", specs, (InputSpec(p.y, p.dtype),), run, notes=("random indices in range",))


@register_movement("GatherElements")
def _gather_elements(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    """Values picked along ``axis`` by an index array of the output's shape, which on the other axes
    may be shorter than the data (ONNX reads the data's leading part there: a view of it here)."""
    if not p.inputs:
        raise UnsupportedLayer("GatherElements without a known data shape")
    x = p.inputs[0]
    axis = _axis(attrs.get("axis", 0), len(x), p.op)
    indices = tuple(p.inputs[1]) if len(p.inputs) > 1 else tuple(p.y)
    if (
        indices != tuple(p.y)
        or len(indices) != len(x)
        or any(i > e for d, (i, e) in enumerate(zip(indices, x, strict=True)) if d != axis)
    ):
        raise UnsupportedLayer(f"GatherElements of {x} by {indices} does not give {p.y}")
    read = tuple(slice(None) if d == axis else slice(0, i) for d, i in enumerate(indices))
    specs = (InputSpec(x, p.dtype), InputSpec(indices, "int64", index_bound=x[axis]))

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.copyto(outputs[0], ops.xp.take_along_axis(inputs[0][read], inputs[1], axis=axis))

    notes = ("random indices in range", "take_along_axis, then a copy into the output")
    return LayerCall(p.op, "take-along-axis", specs, (InputSpec(p.y, p.dtype),), run, notes=notes)


@register_movement("GatherND")
def _gather_nd(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    """Slices of the data picked by index tuples (the index array's last axis), ``batch_dims`` 0."""
    if len(p.inputs) != 2:
        raise UnsupportedLayer(f"GatherND with {len(p.inputs)} known input shapes: the indices' is needed")
    if int(attrs.get("batch_dims", 0) or 0):
        raise UnsupportedLayer("GatherND with batch_dims: not in benanza's CuPy path")
    x, indices = p.inputs
    depth = indices[-1] if indices else 0
    if not 0 < depth <= len(x) or (*indices[:-1], *x[depth:]) != tuple(p.y):
        raise UnsupportedLayer(f"GatherND of {x} by {indices} does not give {p.y}")
    specs = (InputSpec(x, p.dtype), InputSpec(indices, "int64", index_bound=min(x[:depth])))

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        where = tuple(ops.xp.moveaxis(inputs[1], -1, 0))
        ops.xp.copyto(outputs[0], inputs[0][where])

    notes = ("random indices in range", "advanced indexing, then a copy into the output")
    return LayerCall(p.op, "take-nd", specs, (InputSpec(p.y, p.dtype),), run, notes=notes)


@register_movement("ScatterND", "ScatterElements")
def _scatter(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    """The data copied into the output, then the updates written at the indices: what ONNX's op describes and
    ONNX Runtime runs for a graph input (a static KV cache fed to the model, whose step's keys ScatterND writes
    at the cache position); a framework updating its own cache in place (``index_copy_``) writes the updates
    only. ``ScatterND``: index tuples on the indices' last axis; ``ScatterElements``: one index per update
    along ``axis``. Random indices in range.

    Raises:
        UnsupportedLayer: a ``reduction`` (add, mul, max, min), or shapes that do not fit.
    """
    if str(attrs.get("reduction", "none")) != "none":
        raise UnsupportedLayer(f"{p.op} with reduction {attrs.get('reduction')!r}: only assignment is mapped")
    if len(p.inputs) != 3:
        raise UnsupportedLayer(f"{p.op} with {len(p.inputs)} known input shapes: data, indices and updates needed")
    x, indices, updates = p.inputs
    if tuple(p.y) != tuple(x):
        raise UnsupportedLayer(f"{p.op} of {x} writing {p.y}")
    if p.op == "ScatterND":
        depth = indices[-1] if indices else 0
        if not 0 < depth <= len(x) or (*indices[:-1], *x[depth:]) != tuple(updates):
            raise UnsupportedLayer(f"ScatterND of {x} at {indices} by {updates}")
        bound = min(x[:depth])
    else:
        axis = _axis(attrs.get("axis", 0), len(x), p.op)
        if len(indices) != len(x) or tuple(indices) != tuple(updates):
            raise UnsupportedLayer(f"ScatterElements of {x} at {indices} by {updates}")
        bound = x[axis]
    specs = (InputSpec(x, p.dtype), InputSpec(indices, "int64", index_bound=bound), InputSpec(updates, p.dtype))

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp = ops.xp
        data, where, values = inputs
        out = outputs[0]
        xp.copyto(out, data)
        if p.op == "ScatterND":
            out[tuple(xp.moveaxis(where, -1, 0))] = values
        else:  # each update's own position, its index along the axis
            grid = [
                xp.arange(n).reshape([n if d == i else 1 for d in range(where.ndim)]) for i, n in enumerate(where.shape)
            ]
            grid[axis] = where
            out[tuple(grid)] = values

    notes = ("random indices in range", "the data copied to the output, then the updates written at the indices")
    return LayerCall(p.op, "copy-scatter", specs, (InputSpec(p.y, p.dtype),), run, notes=notes)


@register_movement("Expand")
def _expand(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    (x,) = _exact_inputs(p, 1)
    if np.broadcast_shapes(x.shape, p.y) != tuple(p.y):
        raise UnsupportedLayer(f"Expand of {x.shape} to {p.y}")

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.copyto(outputs[0], inputs[0])  # copyto broadcasts

    return LayerCall(p.op, "copy-broadcast", (x,), (InputSpec(p.y, p.dtype),), run)


def _repeat_copy(xp: Any, x: Any, out: Any, factors: Sequence[int], inner: bool) -> None:
    """Copy ``x`` into ``out`` with each axis repeated ``factors[d]`` times, as one broadcast copy.

    ``inner``: every element repeated in place (nearest upsampling, ``np.repeat``); else the
    whole axis repeated (``np.tile``). ``out`` is contiguous, so the split view is a view.
    """
    split, source = [], []
    for extent, factor in zip(x.shape, factors, strict=True):
        split += [extent, factor] if inner else [factor, extent]
        source += [extent, 1] if inner else [1, extent]
    xp.copyto(out.reshape(split), x.reshape(source))


@register_movement("Tile")
def _tile(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    (x,) = _exact_inputs(p, 1)
    if len(p.y) != len(x.shape) or any(o % i for o, i in zip(p.y, x.shape, strict=True)):
        raise UnsupportedLayer(f"Tile of {x.shape} to {p.y}")
    reps = tuple(o // i for o, i in zip(p.y, x.shape, strict=True))

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        _repeat_copy(ops.xp, inputs[0], outputs[0], reps, inner=False)

    return LayerCall(p.op, "copy-tiled", (x,), (InputSpec(p.y, p.dtype),), run)


_EXACT_UPSAMPLING = {
    ("asymmetric", "floor"),
    ("half_pixel", "round_prefer_floor"),
    ("half_pixel", "round_prefer_ceil"),
    ("pytorch_half_pixel", "round_prefer_floor"),
    ("pytorch_half_pixel", "round_prefer_ceil"),
}


@register_movement("Resize", "Upsample")
def _resize(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    """Nearest-neighbour resizing by integer factors, where index rounding makes it a plain repeat or stride."""
    if not p.inputs:
        raise UnsupportedLayer(f"{p.op} without a known input shape")
    x = p.inputs[0]
    mode = str(attrs.get("mode", "nearest"))
    if p.op == "Upsample":  # Upsample's nearest is floor(out / scale); its linear samples at out / scale
        transform, rounding = "asymmetric", "floor"
    else:
        transform = str(attrs.get("coordinate_transformation_mode", "half_pixel"))
        rounding = str(attrs.get("nearest_mode", "round_prefer_floor"))
    if mode in ("linear", "bilinear"):
        return _linear_resize(p, attrs, x, transform)
    if mode != "nearest":
        raise UnsupportedLayer(f"{p.op} mode {mode!r}: the CuPy path runs nearest-neighbour and linear")
    if len(p.y) != len(x):
        raise UnsupportedLayer(f"{p.op} of {x} to {p.y}")
    up, down = [1] * len(x), [1] * len(x)
    for d, (i, o) in enumerate(zip(x, p.y, strict=True)):
        if o >= i and o % i == 0:
            up[d] = o // i
        elif o < i and i % o == 0:
            down[d] = i // o
        else:
            raise UnsupportedLayer(f"{p.op} of {x} to {p.y}: not an integer scale on axis {d}")
    if any(f > 1 for f in up) and (transform, rounding) not in _EXACT_UPSAMPLING:
        raise UnsupportedLayer(f"{p.op} nearest {transform}/{rounding}: not a plain repeat")
    if any(f > 1 for f in down) and transform != "asymmetric":
        raise UnsupportedLayer(f"{p.op} nearest downscaling with {transform}: not a plain stride")
    stride = tuple(slice(None, None, f) for f in down)

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        _repeat_copy(ops.xp, inputs[0][stride], outputs[0], up, inner=True)

    return LayerCall(p.op, "copy-nearest", (InputSpec(x, p.dtype),), (InputSpec(p.y, p.dtype),), run)


# where an output coordinate ``o`` (of ``n``) samples an input axis of ``m``, ``s`` = n / m: in C (a
# template of those names), then in NumPy
_SAMPLE_AT = {
    "half_pixel": ("((A){o} + (A)0.5) / (A){s} - (A)0.5", lambda o, n, m, s: (o + 0.5) / s - 0.5),
    "pytorch_half_pixel": (
        "({n} > 1 ? ((A){o} + (A)0.5) / (A){s} - (A)0.5 : (A)0)",
        lambda o, n, m, s: (o + 0.5) / s - 0.5 if n > 1 else 0.0 * o,
    ),
    "align_corners": (
        "({n} > 1 ? (A){o} * (A)({m} - 1) / (A)({n} - 1) : (A)0)",
        lambda o, n, m, s: o * (m - 1) / (n - 1) if n > 1 else 0.0 * o,
    ),
    "asymmetric": ("(A){o} / (A){s}", lambda o, n, m, s: o / s),
}


def _linear_resize(p: DataMovementParams, attrs: dict[str, Any], x: Shape, transform: str) -> LayerCall:
    """Bilinear (or linear, on the last axis) resizing of the last two axes: one kernel, each output
    value read from its four neighbours, as frameworks' upsampling kernels do. The scale of an axis is
    its output over its input length (what a ``sizes`` input gives; a ``scales`` input gives that
    output length, its samples within a fraction of a pixel of these)."""
    if transform not in _SAMPLE_AT:
        raise UnsupportedLayer(f"{p.op} linear with {transform} coordinates: not in benanza's kernel")
    if len(x) < 2 or len(p.y) != len(x) or tuple(x[:-2]) != tuple(p.y[:-2]) or 0 in (*x, *p.y):
        raise UnsupportedLayer(f"{p.op} linear of {x} to {p.y}: the kernel resizes the last two axes")
    (hi, wi), (ho, wo) = x[-2:], p.y[-2:]
    if attrs.get("antialias") and (ho < hi or wo < wi):
        raise UnsupportedLayer(f"{p.op} linear downscaling with antialias: not in benanza's kernel")
    at_c, at = _SAMPLE_AT[transform]

    def taps(n: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each output coordinate's two input neighbours along an axis and the second one's weight."""
        source = np.clip(at(np.arange(n, dtype=np.float64), n, m, n / m), 0, m - 1)
        low = np.floor(source).astype(np.int64)
        return low, np.minimum(low + 1, m - 1), source - low

    (y0, y1, wy), (x0, x1, wx) = taps(ho, hi), taps(wo, wi)
    wy, wx = wy[:, None], wx[None, :]

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        v = inputs[0]
        top = v[..., y0[:, None], x0[None, :]] * (1 - wx) + v[..., y0[:, None], x1[None, :]] * wx
        bottom = v[..., y1[:, None], x0[None, :]] * (1 - wx) + v[..., y1[:, None], x1[None, :]] * wx
        ops.xp.copyto(outputs[0], top * (1 - wy) + bottom * wy, casting="unsafe")

    acc = _accumulator(p.dtype)
    sample_y = at_c.format(o="oy", n="ho", m="hi", s="sy")
    sample_x = at_c.format(o="ox", n="wo", m="wi", s="sx")
    operation = f"""const long long ox = i % wo, oy = (i / wo) % ho, plane = i / (wo * ho);
A fy = {sample_y};
A fx = {sample_x};
fy = fy < (A)0 ? (A)0 : (fy > (A)(hi - 1) ? (A)(hi - 1) : fy);
fx = fx < (A)0 ? (A)0 : (fx > (A)(wi - 1) ? (A)(wi - 1) : fx);
const long long y0 = (long long)fy, x0 = (long long)fx;
const long long y1 = y0 + 1 < hi ? y0 + 1 : hi - 1, x1 = x0 + 1 < wi ? x0 + 1 : wi - 1;
const A wy = fy - (A)y0, wx = fx - (A)x0;
const long long base = plane * hi * wi;
const A top = (A)x[base + y0 * wi + x0] * ((A)1 - wx) + (A)x[base + y0 * wi + x1] * wx;
const A bottom = (A)x[base + y1 * wi + x0] * ((A)1 - wx) + (A)x[base + y1 * wi + x1] * wx;
y = (T)(top * ((A)1 - wy) + bottom * wy);"""
    fused = FusedKernel(
        "raw T x, int64 hi, int64 wi, int64 ho, int64 wo, float64 sy, float64 sx",
        "T y",
        operation,
        f"benanza_resize_linear_{transform}",
        f"typedef {acc} A;",
        (hi, wi, ho, wo, ho / hi, wo / wi),
    )
    specs = (InputSpec(x, p.dtype),)
    notes = ("scale: the output's length over the input's",)
    return LayerCall(p.op, fused.name, specs, (InputSpec(p.y, p.dtype),), run, fused, notes)


@register_movement("GridSample")
def _grid_sample(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    """2-D GridSample (``torch.nn.functional.grid_sample``; a deformable attention's sampling, RT-DETR's): each
    output value read at the grid's normalised (x, y) of its position, bilinearly from four taps or from the
    nearest (halves to even), out-of-range taps zero (``zeros``) or the coordinate clamped (``border``),
    ``align_corners`` as ONNX says it. One kernel, an output value a thread, as PyTorch's CUDA kernel runs it.

    Raises:
        UnsupportedLayer: a 5-D (volumetric) sampling, the cubic mode or reflection padding.
    """
    x, grid = _exact_inputs(p, 2)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(str(attrs.get("mode", "linear")), str(attrs.get("mode")))
    padding = str(attrs.get("padding_mode", "zeros"))
    align = bool(int(attrs.get("align_corners", 0) or 0))
    if len(x.shape) != 4 or len(grid.shape) != 4 or grid.shape[3] != 2 or grid.shape[0] != x.shape[0]:
        raise UnsupportedLayer(f"GridSample of {x.shape} at a grid of {grid.shape}: 2-D sampling is mapped")
    if mode not in ("linear", "nearest") or padding not in ("zeros", "border"):
        raise UnsupportedLayer(f"GridSample {mode} with {padding} padding: linear and nearest, zeros and border")
    n, c, hi, wi = x.shape
    ho, wo = grid.shape[1:3]

    def unnormalise(xp: Any, g: Any, size: int) -> Any:
        at = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
        return xp.clip(at, 0, size - 1) if padding == "border" else at

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp = ops.xp
        v, g = inputs
        wide = np.float64 if p.dtype == "float64" else np.float32
        fx, fy = unnormalise(xp, g[..., 0].astype(wide), wi), unnormalise(xp, g[..., 1].astype(wide), hi)
        if mode == "nearest":
            taps = [(xp.rint(fy), xp.rint(fx), xp.ones_like(fx))]
        else:
            x0, y0 = xp.floor(fx), xp.floor(fy)
            wx, wy = fx - x0, fy - y0
            taps = [
                (y0, x0, (1 - wy) * (1 - wx)),
                (y0, x0 + 1, (1 - wy) * wx),
                (y0 + 1, x0, wy * (1 - wx)),
                (y0 + 1, x0 + 1, wy * wx),
            ]
        out = xp.zeros((n, ho, wo, c), dtype=wide)
        batch = xp.arange(n).reshape(n, 1, 1)
        for ty, tx, weight in taps:
            inside = (tx >= 0) & (tx <= wi - 1) & (ty >= 0) & (ty <= hi - 1)
            row, col = xp.clip(ty, 0, hi - 1).astype(np.int64), xp.clip(tx, 0, wi - 1).astype(np.int64)
            out += v[batch, :, row, col].astype(wide) * xp.where(inside, weight, 0)[..., None]  # (n, ho, wo, c)
        xp.copyto(outputs[0], out.transpose(0, 3, 1, 2), casting="unsafe")

    acc = _accumulator(p.dtype)
    rint = _math(p.dtype)["rint"]
    at = "(g + (A)1) / (A)2 * (A)(size - 1)" if align else "((g + (A)1) * (A)size - (A)1) / (A)2"
    clamp = "at = at < (A)0 ? (A)0 : (at > (A)(size - 1) ? (A)(size - 1) : at);" if padding == "border" else ""
    preamble = f"""typedef {acc} A;
__device__ A benanza_unnormalise(A g, long long size) {{ A at = {at}; {clamp} return at; }}
template <typename V> __device__ A benanza_tap(V v, long long base, long long hi, long long wi, A ty, A tx) {{
    if (tx < (A)0 || tx > (A)(wi - 1) || ty < (A)0 || ty > (A)(hi - 1)) return (A)0;
    return (A)v[base + (long long)ty * wi + (long long)tx];
}}"""  # a template: CuPy's raw array is a CArray, and T is the kernel's own, not the preamble's
    if mode == "nearest":
        sample = f"y = (T)benanza_tap(x, base, hi, wi, {rint}(fy), {rint}(fx));"
    else:
        sample = """const A x0 = floor(fx), y0 = floor(fy), wx = fx - x0, wy = fy - y0;
y = (T)(benanza_tap(x, base, hi, wi, y0, x0) * ((A)1 - wy) * ((A)1 - wx)
    + benanza_tap(x, base, hi, wi, y0, x0 + (A)1) * ((A)1 - wy) * wx
    + benanza_tap(x, base, hi, wi, y0 + (A)1, x0) * wy * ((A)1 - wx)
    + benanza_tap(x, base, hi, wi, y0 + (A)1, x0 + (A)1) * wy * wx);"""
    operation = f"""const long long ox = i % wo, oy = (i / wo) % ho, ch = (i / (wo * ho)) % c, b = i / (wo * ho * c);
const long long at = ((b * ho + oy) * wo + ox) * 2;
const A fx = benanza_unnormalise((A)grid[at], wi), fy = benanza_unnormalise((A)grid[at + 1], hi);
const long long base = (b * c + ch) * hi * wi;
{sample}"""
    name = f"benanza_grid_sample_{mode}_{padding}{'_aligned' if align else ''}"
    fused = FusedKernel(
        "raw T x, raw T grid, int64 c, int64 hi, int64 wi, int64 ho, int64 wo",
        "T y",
        operation,
        name,
        preamble,
        (c, hi, wi, ho, wo),
    )
    notes = (f"{mode} sampling, {padding} padding, align_corners {int(align)}",)
    return LayerCall(p.op, name, (x, grid), (InputSpec(p.y, p.dtype),), run, fused, notes)


@register_movement("Split")
def _split(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    """Split into copies; the parameters carry the first output only, so parts are its size unless ``split`` says."""
    if not p.inputs:
        raise UnsupportedLayer("Split without a known input shape")
    x = p.inputs[0]
    axis = _axis(attrs.get("axis", 0), len(x), p.op)
    sizes = [int(s) for s in attrs.get("split") or ()]
    if not sizes:
        if p.y[axis] <= 0 or x[axis] % p.y[axis]:
            raise UnsupportedLayer(f"Split of {x} into parts like {p.y}: the other parts' sizes are unknown")
        sizes = [p.y[axis]] * (x[axis] // p.y[axis])
    if sum(sizes) != x[axis] or sizes[0] != p.y[axis]:
        raise UnsupportedLayer(f"Split of {x} into {sizes} along {axis} does not give {p.y} first")
    offsets = np.cumsum([0, *sizes]).tolist()
    parts = [
        tuple(slice(o, o + s) if d == axis else slice(None) for d in range(len(x)))
        for o, s in zip(offsets[:-1], sizes, strict=True)
    ]
    outputs = tuple(InputSpec(tuple(s if d == axis else e for d, e in enumerate(x)), p.dtype) for s in sizes)

    def run(ops: ArrayOps, inputs: Sequence[Any], outs: Sequence[Any]) -> None:
        for part, out in zip(parts, outs, strict=True):
            ops.xp.copyto(out, inputs[0][part])

    return LayerCall(p.op, f"copy-{len(sizes)}-parts", (InputSpec(x, p.dtype),), outputs, run)


@register_movement("TopK")
def _topk(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    """The ``k`` largest (or smallest) values along ``axis`` and their indices, best first, ties to
    the lower index (as ONNX Runtime orders them). Up to ``TOPK_KERNEL_MAX`` of them: one block a
    row, ``k`` rounds of a block-wide selection (``topk_kernel``: a mixture of experts' router picks
    2 to 8 of 8 to 256); more: the rows sorted whole (``argsort``), which costs more than a
    selection would: an upper figure for such a layer."""
    if not p.inputs:
        raise UnsupportedLayer("TopK without a known input shape")
    x = p.inputs[0]
    axis = _axis(attrs.get("axis", -1), len(x), p.op)
    k, n = p.y[axis] if p.y else 0, x[axis] if x else 0
    if not 0 < k <= n or tuple(e for d, e in enumerate(x) if d != axis) != tuple(
        e for d, e in enumerate(p.y) if d != axis
    ):
        raise UnsupportedLayer(f"TopK of {x} along {axis} does not give {p.y}")
    largest = bool(int(attrs.get("largest", 1)))
    outputs = (InputSpec(p.y, p.dtype), InputSpec(p.y, "int64"))

    def run(ops: ArrayOps, inputs: Sequence[Any], outs: Sequence[Any]) -> None:
        xp, data = ops.xp, inputs[0]
        stable = {"kind": "stable"} if xp is np else {}  # CuPy's argsort is stable and takes no kind
        # NaN as the greatest value: first among the largest (its key -inf), last among the smallest
        key = xp.where(xp.isnan(data), -xp.inf, -data) if largest else data
        order = xp.argsort(key, axis=axis, **stable)
        picked = xp.take(order, xp.arange(k), axis=axis)
        xp.copyto(outs[1], picked)
        xp.copyto(outs[0], xp.take_along_axis(data, picked, axis=axis))

    specs = (InputSpec(x, p.dtype),)
    if k > TOPK_KERNEL_MAX or p.dtype not in _ROW_TYPES:
        notes = (f"k {k} > {TOPK_KERNEL_MAX}: rows sorted whole (argsort), more than a selection costs",)
        return LayerCall(p.op, "argsort-take", specs, outputs, run, notes=notes)
    inner = math.prod(x[axis + 1 :])
    raw = topk_kernel(p.dtype, largest, math.prod(x) // n, n, inner, k)
    return LayerCall(p.op, raw.name, specs, outputs, run, raw=raw)


TOPK_KERNEL_MAX = 64


def topk_kernel(dtype: str, largest: bool, rows: int, n: int, inner: int, k: int) -> RowKernel:
    """The ``k`` best of each of ``rows`` rows of ``n`` values ``inner`` apart: a block a row; each
    of ``k`` rounds every thread finds its best value after the previous round's pick (in the order
    value, then index), the block merges them by warp shuffles and shared memory, and thread 0
    writes the pick. Reads the row ``k`` times: for the small ``k`` of routers and heads."""
    if dtype not in _ROW_TYPES:
        raise UnsupportedLayer(f"TopK in {dtype}: the kernel runs {', '.join(_ROW_TYPES)}")
    if rows > 2**31 - 1:
        raise UnsupportedLayer(f"TopK of {rows} rows: more blocks than a grid's x dimension holds")
    t, a, load, store, _ = _ROW_TYPES[dtype]
    name = f"benanza_top_k_{'largest' if largest else 'smallest'}_{dtype}"
    beats = "v > w" if largest else "v < w"
    nan_first = "vn" if largest else "wn"  # the NaN first among the largest, last among the smallest
    source = f"""typedef {t} T;
typedef {a} A;
__device__ __forceinline__ A load(T v) {{ {load} }}
__device__ __forceinline__ T store(A v) {{ {store} }}
// (v, i) comes before (w, j): a better value, or the same at a lower index; j < 0 is no value.
// NaN counts as greater than every number (ONNX Runtime's order), equal to NaN.
__device__ __forceinline__ bool before(A v, long long i, A w, long long j) {{
    if (i < 0) return false;
    if (j < 0) return true;
    const bool vn = v != v, wn = w != w;
    if (vn || wn) return vn == wn ? i < j : {nan_first};
    return {beats} || (v == w && i < j);
}}
__device__ __forceinline__ void best_of_warp(A& v, long long& i) {{
    for (int o = 16; o > 0; o >>= 1) {{
        const A w = __shfl_xor_sync(0xffffffffu, v, o);
        const long long j = __shfl_xor_sync(0xffffffffu, i, o);
        if (before(w, j, v, i)) {{
            v = w;
            i = j;
        }}
    }}
}}
extern "C" __global__ void {name}(const T* __restrict__ x, T* __restrict__ values,
                                  long long* __restrict__ indices, long long n, long long inner, long long k) {{
    const long long row = blockIdx.x, outer = row / inner, in = row % inner;
    const T* xr = x + outer * n * inner + in;
    T* vr = values + outer * k * inner + in;
    long long* ir = indices + outer * k * inner + in;
    __shared__ A s_v[32];
    __shared__ long long s_i[32];
    __shared__ A pick_v;
    __shared__ long long pick_i;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    A pv = (A)0;
    long long pi = -1;
    for (long long r = 0; r < k; ++r) {{
        A bv = (A)0;
        long long bi = -1;
        for (long long j = threadIdx.x; j < n; j += blockDim.x) {{
            const A v = load(xr[j * inner]);
            if ((pi < 0 || before(pv, pi, v, j)) && before(v, j, bv, bi)) {{
                bv = v;
                bi = j;
            }}
        }}
        best_of_warp(bv, bi);
        if (lane == 0) {{
            s_v[warp] = bv;
            s_i[warp] = bi;
        }}
        __syncthreads();
        if (warp == 0) {{
            bv = lane < warps ? s_v[lane] : (A)0;
            bi = lane < warps ? s_i[lane] : -1;
            best_of_warp(bv, bi);
            if (lane == 0) {{
                pick_v = bv;
                pick_i = bi;
                vr[r * inner] = store(bv);
                ir[r * inner] = bi;
            }}
        }}
        __syncthreads();
        pv = pick_v;
        pi = pick_i;
    }}
}}
"""
    threads = min(ROW_THREADS_MAX, max(1, math.ceil(n / ROW_VALUES_PER_THREAD / 32)) * 32)
    return RowKernel(source, name, (rows,), (threads,), (("int64", n), ("int64", inner), ("int64", k)))


@register_movement("DepthToSpace", "SpaceToDepth")
def _depth_space(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    """Channels moved into ``blocksize`` x ``blocksize`` pixels (DepthToSpace, DCR or CRD) or back: a
    reshape, one transposing copy and a reshape, as ONNX defines them."""
    if not p.inputs or len(p.inputs[0]) != 4:
        raise UnsupportedLayer(f"{p.op} without a known N x C x H x W input")
    (n, c, h, w), b = p.inputs[0], int(attrs.get("blocksize", 0) or 0)
    if b < 1:
        raise UnsupportedLayer(f"{p.op} with blocksize {b}")
    if p.op == "DepthToSpace":
        crd = str(attrs.get("mode", "DCR")) == "CRD"
        shape = (n, c // (b * b), b, b, h, w) if crd else (n, b, b, c // (b * b), h, w)
        perm = (0, 1, 4, 2, 5, 3) if crd else (0, 3, 4, 1, 5, 2)
        y = (n, c // (b * b), h * b, w * b)
    else:
        shape, perm, y = (n, c, h // b, b, w // b, b), (0, 3, 5, 1, 2, 4), (n, c * b * b, h // b, w // b)
    if y != tuple(p.y) or math.prod(shape) != n * c * h * w:
        raise UnsupportedLayer(f"{p.op} of {p.inputs[0]} by {b} does not give {p.y}")

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.copyto(outputs[0], inputs[0].reshape(shape).transpose(perm).reshape(y))

    return LayerCall(p.op, "transpose-copy", (InputSpec(p.inputs[0], p.dtype),), (InputSpec(p.y, p.dtype),), run)


@register_movement("Trilu")
def _trilu(p: DataMovementParams, attrs: dict[str, Any]) -> LayerCall:
    """The upper (``upper`` 1) or lower triangle of the last two axes from diagonal ``k``, the rest
    zeroed: one CuPy kernel. ``k`` from the constant input (``k`` attribute here), else 0."""
    if not p.inputs or len(p.inputs[0]) < 2:
        raise UnsupportedLayer("Trilu without a known input of at least 2 axes")
    upper, k = bool(int(attrs.get("upper", 1))), int(attrs.get("k", 0) or 0)

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp = ops.xp
        xp.copyto(outputs[0], xp.triu(inputs[0], k) if upper else xp.tril(inputs[0], k))

    x = p.inputs[0]
    return LayerCall(p.op, "triu" if upper else "tril", (InputSpec(x, p.dtype),), (InputSpec(p.y, p.dtype),), run)


# ------------------------------------------------------------------------ reductions

_REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "amax", "ReduceMin": "amin", "ReduceProd": "prod"}


@register_reduction(*_REDUCE)
def _reduce(p: ReductionParams, attrs: dict[str, Any]) -> LayerCall:
    name, axes, keepdims = _REDUCE[p.op], p.axes, p.keepdims

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        getattr(ops.xp, name)(inputs[0], axis=axes, keepdims=keepdims, out=outputs[0])

    return LayerCall(p.op, name, (InputSpec(p.x, p.dtype),), (InputSpec(p.y, p.dtype),), run)


# reductions of a function of the values, or a function of the reduction: (what runs, the reference)
_COMPOSITE_REDUCE: dict[str, tuple[str, Callable[..., Any]]] = {
    "ReduceL1": ("absolute+sum", lambda xp, x, kw: xp.abs(x).sum(**kw)),
    "ReduceL2": ("square+sum+sqrt", lambda xp, x, kw: xp.sqrt((x * x).sum(**kw))),
    "ReduceSumSquare": ("square+sum", lambda xp, x, kw: (x * x).sum(**kw)),
    "ReduceLogSum": ("sum+log", lambda xp, x, kw: xp.log(x.sum(**kw))),
    "ReduceLogSumExp": (
        "amax+exp+sum+log",  # shifted by the largest value, as frameworks compute it (no overflow)
        lambda xp, x, kw: xp.log(xp.exp(x - x.max(axis=kw["axis"], keepdims=True)).sum(**kw)) + x.max(**kw),
    ),
}


@register_reduction(*_COMPOSITE_REDUCE)
def _composite_reduce(p: ReductionParams, attrs: dict[str, Any]) -> LayerCall:
    """A norm, a sum of squares or a log-sum: CuPy's element-wise and reduction kernels in turn (a
    framework fuses the element-wise part into its reduction: this costs more)."""
    kernel, reference = _COMPOSITE_REDUCE[p.op]
    kw = {"axis": p.axes, "keepdims": p.keepdims}

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ops.xp.copyto(outputs[0], reference(ops.xp, inputs[0], kw), casting="unsafe")

    notes = (f"{kernel}: CuPy's kernels one after another",)
    return LayerCall(p.op, kernel, (InputSpec(p.x, p.dtype),), (InputSpec(p.y, p.dtype),), run, notes=notes)


@register_reduction("ArgMax", "ArgMin")
def _arg_reduce(p: ReductionParams, attrs: dict[str, Any]) -> LayerCall:
    """The index of the first (``select_last_index``: the last) largest or smallest value: CuPy's
    ``argmax``/``argmin`` (one reduction kernel; the last index through a reversed view)."""
    (axis,), name = p.axes, "argmax" if p.op == "ArgMax" else "argmin"
    n = p.x[axis]

    def run(ops: ArrayOps, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp, x = ops.xp, inputs[0]
        if p.select_last_index:
            found = n - 1 - getattr(xp, name)(xp.flip(x, axis=axis), axis=axis)
        else:
            found = getattr(xp, name)(x, axis=axis)
        xp.copyto(outputs[0], found.reshape(p.y))

    return LayerCall(p.op, name, (InputSpec(p.x, p.dtype),), (InputSpec(p.y, "int64"),), run)


# ------------------------------------------------------------------------ normalization


_NORMALIZATIONS = (
    *("LayerNormalization", "RMSNormalization", "InstanceNormalization", "GroupNormalization"),
    *("SimplifiedLayerNormalization", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization"),
)


@register_normalization(*_NORMALIZATIONS)
def _normalization(p: NormalizationParams, attrs: dict[str, Any]) -> LayerCall:
    """Each of ``rows`` rows of ``cols`` values normalised by its own mean (none for the RMS kinds)
    and root-mean-square deviation, times the scale (plus the bias): a column's (LayerNormalization),
    a row's channel's (InstanceNormalization) or a group's or a channel's (GroupNormalization).
    The skip kinds normalise ``x + skip (+ pre_bias)`` and may write that sum as a second output."""
    rows, cols, eps, (period, stride, run_length) = p.rows, p.cols, p.epsilon, p.affine
    if rows * cols == 0:
        raise UnsupportedLayer(f"{p.op} of an empty {p.x}")
    skip_rows = p.skip_rows
    if p.skip and (skip_rows * cols != math.prod(p.skip) or rows % skip_rows):
        raise UnsupportedLayer(f"{p.op}: a skip of {p.skip} does not repeat over rows of {cols} of {p.x}")
    rms, affine = p.rms, (p.affine_size,)
    specs = (InputSpec(p.x, p.dtype),)
    specs += (InputSpec(p.skip, p.dtype),) if p.skip else ()
    specs += (InputSpec(affine, p.dtype),)
    specs += (InputSpec(affine, p.dtype),) if p.bias else ()
    specs += (InputSpec((cols,), p.dtype),) if p.pre_bias else ()
    outputs = (InputSpec(p.x, p.dtype),) + ((InputSpec(p.x, p.dtype),) if p.sum_out else ())

    def run(ops: ArrayOps, inputs: Sequence[Any], outs: Sequence[Any]) -> None:
        xp, rest = ops.xp, list(inputs[1:])
        x = inputs[0].reshape(rows, cols)
        if skip_rows:
            x = x + xp.tile(rest.pop(0).reshape(skip_rows, cols), (rows // skip_rows, 1))
        scale, shift = rest.pop(0), rest.pop(0) if p.bias else None
        if p.pre_bias:
            x = x + rest.pop(0)
        if p.sum_out:
            xp.copyto(outs[1].reshape(rows, cols), x, casting="unsafe")
        centered = x if rms else x - x.mean(axis=1, keepdims=True)
        at = (xp.arange(rows)[:, None] % period) * stride + xp.arange(cols)[None, :] // run_length
        y = centered / xp.sqrt((centered * centered).mean(axis=1, keepdims=True) + eps) * scale[at]
        if shift is not None:
            y = y + shift[at]
        xp.copyto(outs[0].reshape(rows, cols), y, casting="unsafe")

    raw = row_norm_kernel(p)
    return LayerCall(p.op, raw.name, specs, outputs, run, raw=raw)


# per dtype: the C type a kernel reads and writes, the one it computes in, how it converts, its sqrt
_ROW_TYPES = {
    "float32": ("float", "float", "return v;", "return v;", "sqrtf"),
    "float64": ("double", "double", "return v;", "return v;", "sqrt"),
    # half as its bits: PTX converts (NVRTC needs no header for it)
    "float16": (
        "unsigned short",
        "float",
        'float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v)); return f;',
        'unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v)); return h;',
        "sqrtf",
    ),
}
ROW_THREADS_MAX = 1024
ROW_VALUES_PER_THREAD = 4  # each thread reads about this many values of a row (cols / threads)


def row_norm_kernel(p: NormalizationParams) -> RowKernel:
    """The one-kernel row normalisation: a block per row; its threads (a multiple of 32, at most
    1,024) take the row's count, mean and sum of squared deviations in one pass (Welford's, as
    PyTorch's kernel does: no cancellation for rows far from 0), merge them across the warp by
    shuffles and across warps in shared memory (Chan's merge), then write the row. RMSNormalization
    takes the mean square from the same statistics (deviations plus the squared mean).

    ``p.affine`` ``(P, Q, R)``: value ``i`` of row ``r`` takes scale and bias ``(r % P) * Q + i // R``.
    ``(1, 0, 1)`` is a column's (LayerNormalization); ``R == cols`` one a row, read once
    (InstanceNormalization, GroupNormalization-18: ``_row_affine``); else a channel of the row's
    group (GroupNormalization-21: ``_channel_affine``), ``P``, ``Q``, ``R`` passed after ``eps``.

    ONNX Runtime's SkipLayerNormalization: each row is ``x + skip`` (``skip_rows`` rows of it, the
    last parameter, repeated over ``x``'s) ``+ pre_bias`` (a column's) before it is normalised, and
    with ``sum_out`` that sum is written too (the next residual's input), in the statistics' pass."""
    dtype, rms, bias, rows, cols, eps = p.dtype, p.rms, p.bias, p.rows, p.cols, p.epsilon
    affine, skip_rows, pre_bias, sum_out = p.affine, p.skip_rows, p.pre_bias, p.sum_out
    if dtype not in _ROW_TYPES:
        raise UnsupportedLayer(f"row normalisation in {dtype}: the kernel runs {', '.join(_ROW_TYPES)}")
    t, a, load, store, sqrt = _ROW_TYPES[dtype]
    mode = "" if affine == (1, 0, 1) else "_row_affine" if affine[2] == cols else "_channel_affine"
    kind = "rms_norm" if rms else "layer_norm"
    name = f"benanza_{kind}_{dtype}{'_skip' if skip_rows else ''}{'_bias' if bias else ''}{mode}"
    name += ("_prebias" if pre_bias else "") + ("_sum" if sum_out else "")
    value = "load(xr[i])" + (" + load(sr[i])" if skip_rows else "") + (" + load(pre_bias[i])" if pre_bias else "")
    extra_inputs = (" const T* __restrict__ bias," if bias else "") + (
        " const T* __restrict__ pre_bias," if pre_bias else ""
    )
    skip_rows_param = ", long long skip_rows" if skip_rows else ""
    rows_of = "".join(
        (
            "\n    const T* sr = skip + (long long)(blockIdx.x % skip_rows) * cols;" if skip_rows else "",
            "\n    T* yr_sum = y_sum + (long long)blockIdx.x * cols;" if sum_out else "",
        )
    )
    centre, spread = ("(A)0", "var + mean * mean") if rms else ("mean", "var")
    extra = ", long long period, long long stride, long long run_length" if mode else ""
    hoist, scaled = "", "* load(scale[i]);" + (" v += load(bias[i]);" if bias else "")
    if mode == "_row_affine":
        hoist = "const long long c = (long long)(blockIdx.x % period) * stride;\n    const A s = load(scale[c]);"
        hoist += " const A b = load(bias[c]);" if bias else ""
        scaled = "* s;" + (" v += b;" if bias else "")
    elif mode:
        at = "(long long)(blockIdx.x % period) * stride + i / run_length"
        scaled = f"* load(scale[{at}]);" + (f" v += load(bias[{at}]);" if bias else "")
    source = f"""typedef {t} T;
typedef {a} A;
__device__ __forceinline__ A load(T v) {{ {load} }}
__device__ __forceinline__ T store(A v) {{ {store} }}
__device__ __forceinline__ void merge(A& n, A& mean, A& m2, A nb, A mb, A m2b) {{
    const A nn = n + nb;
    if (nn > (A)0) {{
        const A d = mb - mean, w = nb / nn;
        m2 += m2b + d * d * n * w;
        mean += d * w;
    }}
    n = nn;
}}
__device__ __forceinline__ void merge_warp(A& n, A& mean, A& m2) {{
    for (int o = 16; o > 0; o >>= 1) {{
        const A nb = __shfl_xor_sync(0xffffffffu, n, o);
        const A mb = __shfl_xor_sync(0xffffffffu, mean, o);
        const A m2b = __shfl_xor_sync(0xffffffffu, m2, o);
        merge(n, mean, m2, nb, mb, m2b);
    }}
}}
extern "C" __global__ void {name}(const T* __restrict__ x,{
        " const T* __restrict__ skip," if skip_rows else ""
    } const T* __restrict__ scale,{extra_inputs} T* __restrict__ y,{
        " T* __restrict__ y_sum," if sum_out else ""
    } long long cols, A eps{extra}{skip_rows_param}) {{
    const T* xr = x + (long long)blockIdx.x * cols;
    T* yr = y + (long long)blockIdx.x * cols;{rows_of}
    A n = (A)0, mean = (A)0, m2 = (A)0;
    for (long long i = threadIdx.x; i < cols; i += blockDim.x) {{
        const A v = {value};{" yr_sum[i] = store(v);" if sum_out else ""}
        n += (A)1;
        const A d = v - mean;
        mean += d / n;
        m2 += d * (v - mean);
    }}
    __shared__ A s_n[32];
    __shared__ A s_mean[32];
    __shared__ A s_m2[32];
    merge_warp(n, mean, m2);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    if (lane == 0) {{
        s_n[warp] = n;
        s_mean[warp] = mean;
        s_m2[warp] = m2;
    }}
    __syncthreads();
    if (warp == 0) {{
        n = lane < warps ? s_n[lane] : (A)0;
        mean = lane < warps ? s_mean[lane] : (A)0;
        m2 = lane < warps ? s_m2[lane] : (A)0;
        merge_warp(n, mean, m2);
        if (lane == 0) {{
            s_mean[0] = mean;
            s_m2[0] = m2;
        }}
    }}
    __syncthreads();
    mean = s_mean[0];
    const A var = s_m2[0] / (A)cols;
    const A centre = {centre};
    const A rstd = (A)1 / {sqrt}({spread} + eps);
    {hoist}
    for (long long i = threadIdx.x; i < cols; i += blockDim.x) {{
        A v = ({value} - centre) * rstd {scaled}
        yr[i] = store(v);
    }}
}}
"""
    if rows > 2**31 - 1:
        raise UnsupportedLayer(f"row normalisation of {rows} rows: more blocks than a grid's x dimension holds")
    warps = math.ceil(cols / ROW_VALUES_PER_THREAD / 32)
    threads = min(ROW_THREADS_MAX, max(1, warps) * 32)
    accumulator = "float64" if a == "double" else "float32"
    scalars: tuple[tuple[str, float | int], ...] = (("int64", cols), (accumulator, eps))
    if mode:
        scalars += tuple(("int64", v) for v in affine)
    if skip_rows:
        scalars += (("int64", skip_rows),)
    return RowKernel(source, name, (rows,), (threads,), scalars)


# ------------------------------------------------------------------------ block-quantized GEMM

GEMV_ROWS_MAX = 16  # rows of A up to which the dequantising GEMV kernel runs (a decoder's tokens)
GEMV_WARPS = 4  # output columns a block computes, a warp each


@register_quantized_gemm("MatMulNBits")
def _matmul_nbits(p: BlockQuantizedGemmParams, attrs: dict[str, Any]) -> LayerCall:
    """``a @ dequantize(b).T (+ bias)``. Up to ``GEMV_ROWS_MAX`` rows: one kernel that reads the packed
    weight once a row and dequantises it in registers (``block_gemv_kernel``: what a decoder's step
    is bound by, the weight's bytes); more rows: the weight dequantised whole, then CuPy's matmul
    (cuBLAS), as frameworks run a prompt."""
    m, n, k, bits, block = p.m, p.n, p.k, p.bits, p.block_size
    # packed bytes over their whole range (every nibble and zero point varies: the device test sees them)
    specs = (InputSpec(p.a, p.dtype), InputSpec(p.b, "uint8", index_bound=256), InputSpec(p.scales, p.dtype))
    specs += (InputSpec(p.zero_points, "uint8", index_bound=256),) if p.zero_points else ()
    specs += (InputSpec((n,), p.dtype),) if p.bias else ()
    outputs = (InputSpec((*p.a[:-1], n), p.dtype),)

    def run(ops: ArrayOps, inputs: Sequence[Any], outs: Sequence[Any]) -> None:
        xp, rest = ops.xp, list(inputs[3:])
        zero_points = rest.pop(0) if p.zero_points else None
        weight = dequantized_blocks(xp, inputs[1], inputs[2], zero_points, bits, block, k)
        y = inputs[0].reshape(m, k) @ weight.T.astype(inputs[0].dtype)
        if p.bias:
            y = y + rest.pop(0)
        xp.copyto(outs[0].reshape(m, n), y, casting="unsafe")

    if m > GEMV_ROWS_MAX or p.dtype not in _ROW_TYPES:
        notes = (f"{m} rows: the weight dequantised whole, then CuPy's matmul (cuBLAS)",)
        return LayerCall(p.op, "dequantize-matmul", specs, outputs, run, notes=notes)
    raw = block_gemv_kernel(p)
    return LayerCall(p.op, raw.name, specs, outputs, run, raw=raw)


def dequantized_blocks(xp: Any, b: Any, scales: Any, zero_points: Any, bits: int, block: int, k: int) -> Any:
    """The ``n`` x ``k`` float weight of MatMulNBits' packed ``b`` (n x blocks x bytes; the low bits of
    a byte first), ``scales`` a block each and packed ``zero_points`` (none: ``2 ** (bits - 1)``)."""
    n, k_blocks = b.shape[0], b.shape[1]
    if bits == 4:
        q = xp.stack([b & 15, b >> 4], axis=-1).reshape(n, k_blocks, block)
    else:
        q = b.reshape(n, k_blocks, block)
    if zero_points is None:
        z = xp.full((n, k_blocks), 2 ** (bits - 1), dtype=np.float64)
    elif bits == 4:
        packed = zero_points.reshape(n, -1)
        z = xp.stack([packed & 15, packed >> 4], axis=-1).reshape(n, -1)[:, :k_blocks].astype(np.float64)
    else:
        z = zero_points.reshape(n, k_blocks).astype(np.float64)
    s = scales.reshape(n, k_blocks).astype(np.float64)
    weight = (q.astype(np.float64) - z[:, :, None]) * s[:, :, None]
    return weight.reshape(n, k_blocks * block)[:, :k]


def block_gemv_kernel(p: BlockQuantizedGemmParams) -> RowKernel:
    """A warp an output ``(row, column)``: its lanes read the column's packed weight a 32-bit word at
    a time (``32 / bits`` values of one block), dequantise them with the block's scale and zero point
    and multiply them by the row of ``a``; a warp shuffle sums the lanes. ``GEMV_WARPS`` columns a
    block, a row of ``a`` a grid row."""
    dtype, bits, zero_points, bias = p.dtype, p.bits, bool(p.zero_points), p.bias
    m, n, k, k_blocks, blob, block = p.m, p.n, p.k, p.k_blocks, p.blob, p.block_size
    t, acc, load, store, _ = _ROW_TYPES[dtype]
    values, mask = 32 // bits, (1 << bits) - 1
    name = f"benanza_block_gemv_{bits}bit_{dtype}{'_zp' if zero_points else ''}{'_bias' if bias else ''}"
    if zero_points and bits == 4:
        zero = "(A)((zp[col * zp_stride + (kb >> 1)] >> ((kb & 1) * 4)) & 15)"
    elif zero_points:
        zero = "(A)zp[col * zp_stride + kb]"
    else:
        zero = f"(A){2 ** (bits - 1)}"
    source = f"""typedef {t} T;
typedef {acc} A;
__device__ __forceinline__ A load(T v) {{ {load} }}
__device__ __forceinline__ T store(A v) {{ {store} }}
extern "C" __global__ void {name}(const T* __restrict__ a, const unsigned char* __restrict__ b,
        const T* __restrict__ scales,{" const unsigned char* __restrict__ zp," if zero_points else ""}{
        " const T* __restrict__ bias," if bias else ""
    } T* __restrict__ y, long long n, long long k, long long k_blocks, long long blob, long long zp_stride) {{
    const long long col = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const long long row = blockIdx.y;
    const int lane = threadIdx.x & 31;
    if (col >= n) return;  // a whole warp: no barrier follows
    const unsigned int* words = (const unsigned int*)(b + col * k_blocks * blob);
    const long long count = k_blocks * blob / 4;
    const T* ar = a + row * k;
    A sum = (A)0;
    for (long long w = lane; w < count; w += 32) {{
        const unsigned int word = words[w];
        const long long kb = (w * 4) / blob;
        const long long k0 = kb * {block} + ((w * 4) % blob) * {8 // bits};
        const A s = load(scales[col * k_blocks + kb]);
        const A z = {zero};
#pragma unroll
        for (int e = 0; e < {values}; ++e) {{
            const long long kk = k0 + e;
            if (kk < k) sum += load(ar[kk]) * (((A)((word >> (e * {bits})) & {mask}u)) - z) * s;
        }}
    }}
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) y[row * n + col] = store(sum{" + load(bias[col])" if bias else ""});
}}
"""
    if m > 65535:
        raise UnsupportedLayer(f"a block GEMV of {m} rows: more than a grid's y dimension holds")
    zp_stride = (k_blocks * bits + 7) // 8 if zero_points else 0
    scalars = (("int64", n), ("int64", k), ("int64", k_blocks), ("int64", blob), ("int64", zp_stride))
    return RowKernel(source, name, (math.ceil(n / GEMV_WARPS), m), (GEMV_WARPS * 32,), scalars)


# ------------------------------------------------------------------------ host arrays (tests, references)


def host_arrays(specs: Sequence[InputSpec], seed: int = 0) -> list[np.ndarray]:
    """NumPy arrays for ``specs``: floats in [-1, 1), booleans, integers (indices in range)."""
    rng = np.random.default_rng(seed)
    return [_host_array(spec, rng) for spec in specs]


def _host_array(spec: InputSpec, rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(spec.dtype)
    if spec.value is not None:
        return np.full(spec.shape, spec.value, dtype=dtype)
    if spec.index_bound is not None:
        return rng.integers(0, spec.index_bound, size=spec.shape, dtype=dtype)
    if dtype == np.bool_:
        return rng.random(spec.shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 8, size=spec.shape, dtype=dtype)
    return (rng.random(spec.shape) * 2.0 - 1.0).astype(dtype)


def empty_outputs(specs: Sequence[InputSpec], xp: Any = np) -> list[Any]:
    """Zeroed output arrays for ``specs`` on ``xp`` (NumPy by default): where a call writes."""
    return [xp.zeros(spec.shape, dtype=spec.dtype) for spec in specs]


# ------------------------------------------------------------------------ GPU


@dataclass(eq=False)
class FrameworkPlan:
    """One layer on the device: its call, its arrays (kept alive here) and its one candidate."""

    call: LayerCall
    inputs: list[Any]
    outputs: list[Any]
    candidates: list[Candidate]


def framework_plan(ctx: Any, p: FrameworkParams, seed: int = 0) -> FrameworkPlan | None:
    """Allocate the layer's arrays on the device and make its candidate; None for a view.

    Raises:
        UnsupportedLayer: no CuPy mapping for the op (see ``layer_call``).
        GpuError: CuPy is missing.
    """
    call = layer_call(p)
    if call is None:
        return None
    return call_plan(ctx, call, p.op, seed)


def call_plan(ctx: Any, call: LayerCall, op: str, seed: int = 0) -> FrameworkPlan:
    """Allocate the arrays of ``call`` on the device and make its one candidate (named ``op:kernel``).

    Raises:
        GpuError: CuPy is missing.
    """
    cupy = _import_cupy()
    ops = cupy_ops()
    rng = np.random.default_rng(seed)
    with cupy.cuda.Device(int(getattr(ctx, "ordinal", 0))), ctx.stream:
        inputs = [_device_array(ctx, cupy, spec, rng) for spec in call.inputs]
        outputs = [
            ctx.array(spec.shape, spec.dtype, "zeros") if _is_float(spec.dtype) else cupy.zeros(spec.shape, spec.dtype)
            for spec in call.outputs
        ]
    if call.fused is not None:
        kernel = _elementwise_kernel(cupy, call.fused)
        scalars = call.fused.scalars

        def run() -> None:
            kernel(*inputs, *scalars, outputs[0])

    elif call.raw is not None:
        raw = call.raw
        row_kernel = _raw_kernel(cupy, raw)
        # a RawKernel takes its scalars as NumPy scalars of the C parameters' types
        args = (*inputs, *outputs, *(np.dtype(t).type(v) for t, v in raw.scalars))

        def run() -> None:
            row_kernel(raw.grid, raw.block, args)

    else:

        def run() -> None:
            call.run(ops, inputs, outputs)

    candidate = Candidate(
        source=SOURCE,
        name=f"{op.lower()}:{call.kernel}",
        launch=_StreamLaunch(ctx.stream, run),
        default=True,
        notes=call.notes,
    )
    return FrameworkPlan(call, inputs, outputs, [candidate])


def framework_candidates(ctx: Any, p: FrameworkParams) -> list[Candidate]:
    """The one CuPy candidate of an element-wise or data-movement layer; [] for a view (nothing runs)."""
    plan = framework_plan(ctx, p)
    return [] if plan is None else plan.candidates


class _StreamLaunch:
    """Run ``fn`` with the context's stream current: CuPy enqueues there and returns at once."""

    __slots__ = ("_fn", "_stream")

    def __init__(self, stream: Any, fn: Callable[[], None]) -> None:
        self._stream, self._fn = stream, fn

    def __call__(self) -> None:
        with self._stream:
            self._fn()


def _is_float(dtype: str) -> bool:
    return dtype in ("float16", "float32", "float64")


def _device_array(ctx: Any, cupy: Any, spec: InputSpec, rng: np.random.Generator) -> Any:
    if _is_float(spec.dtype) and spec.index_bound is None and spec.value is None:
        return ctx.array(spec.shape, spec.dtype, "random")
    return cupy.asarray(_host_array(spec, rng))


_KERNELS: dict[FusedKernel, Any] = {}


def _elementwise_kernel(cupy: Any, fused: FusedKernel) -> Any:
    """The compiled-on-first-call kernel; one object per distinct kernel (CuPy also caches the binary)."""
    key = FusedKernel(fused.in_params, fused.out_params, fused.operation, fused.name, fused.preamble)
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = cupy.ElementwiseKernel(
            fused.in_params, fused.out_params, fused.operation, fused.name, preamble=fused.preamble
        )
        _KERNELS[key] = kernel
    return kernel


_RAW_KERNELS: dict[tuple[str, str], Any] = {}


def _raw_kernel(cupy: Any, raw: RowKernel) -> Any:
    """The ``cupy.RawKernel`` of ``raw``'s source (compiled by NVRTC on its first launch), one per source."""
    key = (raw.source, raw.name)
    kernel = _RAW_KERNELS.get(key)
    if kernel is None:
        kernel = cupy.RawKernel(raw.source, raw.name)
        _RAW_KERNELS[key] = kernel
    return kernel


def _import_cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise GpuError(f"the cupy source needs CuPy: {INSTALL_HINT}") from exc
    return cupy
