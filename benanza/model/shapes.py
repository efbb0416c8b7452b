"""Binding input shapes, folding constants and inferring every tensor's shape.

The work is done by maintained ONNX tooling: the onnxscript optimizer folds constant
subgraphs (``Shape -> Gather -> Concat -> Reshape`` chains become initializers once shapes
are static; a small ``ConstantOfShape``, which it keeps by default, is folded too, as it is
in TorchScript's ``Expand`` of a computed shape and in ``F.pad`` with computed pads), then
ONNX shape inference with data propagation shapes every tensor. Large constants (weights
built by ``ConstantOfShape``) are left as nodes; the extractor treats every node that only
computes constants as a constant, not a layer. Whatever is still unknown, and any shape
computation still unfolded, goes to ``benanza.model.resolve``: ONNX's per-node inference with
constant values, ONNX Runtime's symbolic shape inference, then ONNX Runtime running the node;
the ``ShapeReport`` says which shaped the model.

Initializers that are also graph inputs (IR < 4 exports, the zoo's models) are treated
as constants, as inference servers use them.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import logging
import math
import operator
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from benanza.errors import ModelError, UnboundDimensionError, UsageError, one_line
from benanza.host_memory import memory_bytes
from benanza.model.extract import tensor_type_of
from benanza.model.given_inputs import GivenInput, by_position, given_arrays
from benanza.model.graph import ShapeReport
from benanza.model.keys import VALUE_MAX_ELEMENTS
from benanza.model.load import fold_policy, keep_on_file
from benanza.model.rebatch import rebatched
from benanza.model.request import NO_REQUEST, BindingRequest
from benanza.model.steering import constant_inputs, default_inputs, steered_values, steering_inputs, value_arrays
from benanza.model.walks import node_reads, topological_nodes

log = logging.getLogger(__name__)

_DIM_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def dim_size(param: str, dims: Mapping[str, int]) -> int | None:
    """A symbolic dimension's size from the named ones: its own name's, else its value as an integer
    expression of them (``+ - * //``, integers, parentheses) where it is one: Optimum's exports name an
    attention mask's length ``past_sequence_length + sequence_length``. None: not bound by ``dims``."""
    if param in dims:
        return dims[param]
    try:
        tree = ast.parse(param, mode="eval")
    except SyntaxError:
        return None

    def value(node: ast.AST) -> int | None:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            return dims.get(node.id)
        if isinstance(node, ast.BinOp) and type(node.op) in _DIM_OPERATORS:
            left, right = value(node.left), value(node.right)
            if left is None or right is None or (isinstance(node.op, ast.FloorDiv) and right == 0):
                return None
            return _DIM_OPERATORS[type(node.op)](left, right)
        return None

    size = value(tree)
    return size if size is not None and size >= 0 else None


@dataclass(frozen=True)
class Binding:
    """Concrete shapes for every runtime input, whether the batch was rewritten, and the inputs bound to a
    value (those that choose an ``If``'s branch: ``benanza.model.steering``)."""

    shapes: dict[str, tuple[int, ...]]
    rebatch: dict[str, tuple[int, int]] = field(default_factory=dict)  # input -> (old, new)
    values: dict[str, int] = field(default_factory=dict)  # input -> the value all its elements are
    given: dict[str, GivenInput] = field(default_factory=dict)  # inputs fed their values from files (--input)
    # arrays of a --input .npz or folder that name no input of the model: left out, said (``GivenInput.named``)
    not_inputs: tuple[GivenInput, ...] = ()
    # given inputs whose leading dimension is not the batch size asked: input -> (the file's, asked)
    unbatched: dict[str, tuple[int, int]] = field(default_factory=dict)
    # the file leaves an input dimension free (symbolic or unknown) and fixes none to another size than bound:
    # as it is, it runs at these shapes (``BenchmarkSpec.as_exported``); a rebatch or a --shape over a fixed one
    # makes shapes the file refuses
    exported: bool = False


def runtime_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are fed at run time (not initializers)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def bind_shapes(
    model: onnx.ModelProto,
    path: object,
    batch: int | None = None,
    request: BindingRequest = NO_REQUEST,
    *,
    fits_here: bool = True,
) -> Binding:
    """Decide every runtime input's concrete shape (``request.values`` is ``prepare_model``'s).

    ``request.shapes`` wins for the inputs it names; ``request.dims`` then binds each symbolic dimension it
    names (or whose name is an integer expression of those: ``dim_size``), in every input that
    has it (``--dim past_sequence_length=128``: a decoder's KV cache inputs, one per layer and per
    key and value, bound at once, as ``onnxruntime_perf_test -f`` and
    ``SessionOptions.add_free_dimension_override_by_name`` do; an input given its values by ``request.inputs``
    is bound to its array's shape, and its symbolic dimensions so bind every input that has them);
    ``batch`` then sets a symbolic leading dimension that ``dims`` does not name, or rewrites a fixed leading
    dimension that differs (a "rebatch"), but for an input that chooses an ``If``'s branch (a merged decoder's
    ``use_cache_branch [1]``, one element: at batch 2 its two elements made the If's condition no scalar, the If
    was left unfolded and unbenchmarked, and the model had no layer). Without ``batch`` (None, every command's
    default) the model runs at its own batch: a fixed leading dimension as its file has it, a free one 1 (a
    static export at batch 8, a detector's ``3xHxW`` image and OWLv2's three text queries were rewritten to 1 by
    ``benanza run``'s default, each a warning, and an export's shapes baked into its ``Reshape`` targets
    left a third of some models unbenchmarked). A name in ``dims`` that a model does not
    have binds nothing there (one run binds models of several kinds). Anything left symbolic is an
    ``UnboundDimensionError`` naming every such dimension and the flags that bind them, at once. With ``fits_here`` (the
    models are benchmarked on this machine), an input larger than this machine's physical
    memory is refused here, before anything allocates it; a fleet driver or an analysis of
    another system's results passes False, and each system's workers apply the memory guard.
    """
    shapes, dims = dict(request.shapes), dict(request.dims)
    if batch is not None and batch < 1:
        raise UsageError(f"--batch must be at least 1, got {batch}")
    inputs = runtime_inputs(model)
    names = [i.name for i in inputs]
    requested = by_position(request.inputs, names, path)  # a folder's unnamed tensors, by position
    explicit = {name for name, g in requested.items() if g.named}
    for flag, named in (("--shape", shapes), ("--input", explicit)):
        unknown = sorted(set(named) - set(names))
        if unknown:
            raise ModelError(path, f"{flag} names unknown input(s) {', '.join(unknown)}; inputs are {', '.join(names)}")
    fed = {name: g for name, g in requested.items() if name in names}
    not_inputs = tuple(g for name, g in requested.items() if name not in names)
    if requested and not fed:
        files = ", ".join(sorted({g.path for g in requested.values()}))
        raise ModelError(path, f"--input {files} gives no input of this model; inputs are {', '.join(names)}")
    given_dims(path, inputs, fed, dims)
    shapes.update((name, tuple(g.array.shape)) for name, g in fed.items())
    bound: dict[str, tuple[int, ...]] = {}
    rebatch: dict[str, tuple[int, int]] = {}
    took_batch: set[str] = set()  # inputs whose leading dimension the batch sets
    unbound: list[_Unbound] = []
    for vi in inputs:
        tt = tensor_type_of(vi.type)  # an optional tensor is bound as the tensor it holds
        if tt is None:
            raise ModelError(path, f"input '{vi.name}' is not a tensor ({vi.type.WhichOneof('value')}); not supported")
        if vi.name in shapes:
            given = shapes[vi.name]
            if tt.HasField("shape") and len(tt.shape.dim) != len(given):
                raise ModelError(
                    path, f"--shape {vi.name} has rank {len(given)} but the input has rank {len(tt.shape.dim)}"
                )
            bound[vi.name] = tuple(given)
            continue
        if not tt.HasField("shape"):
            unbound.append(_Unbound(vi.name))
            continue
        dims_out: list[int] = []
        for i, d in enumerate(tt.shape.dim):
            fixed = _declared(d, i)
            named = dim_size(d.dim_param, dims) if fixed is None and d.dim_param and dims else None
            if named is not None:
                dims_out.append(named)
            elif i == 0 and batch is not None:
                if fixed is not None and fixed != batch:
                    rebatch[vi.name] = (fixed, batch)
                took_batch.add(vi.name)
                dims_out.append(batch)
            elif i == 0 and fixed is None:  # the model's own batch, which its file leaves free: 1
                dims_out.append(1)
            elif fixed is not None:
                dims_out.append(fixed)
            else:
                needs = tuple(name for name in _names_in(d.dim_param) if name not in dims)
                unbound.append(_Unbound(vi.name, i, d.dim_param, needs))
                dims_out.append(0)
        bound[vi.name] = tuple(dims_out)
    if unbound:
        raise UnboundDimensionError(path, _unbound_message(unbound))
    if rebatch:  # a flag that chooses an If's branch (a merged decoder's use_cache_branch, [1]) is no batch of data
        exported_shapes = {n: (rebatch[n][0], *s[1:]) if n in rebatch else s for n, s in bound.items()}
        flags = {n for n in steering_inputs(model, exported_shapes) if math.prod(exported_shapes[n]) == 1}
        for name in set(rebatch) & flags:  # not token ids a condition reads too: those are a batch
            bound[name] = exported_shapes[name]
            del rebatch[name]
            took_batch.discard(name)
    if fits_here:
        _refuse_inputs_larger_than_memory(path, inputs, bound)
    exported = _runs_as_exported(inputs, bound)
    # a given array whose leading dimension the file fixes at its own is as exported: no departure where no other
    # input takes the batch either (a fixed x [64] fed 64 values at --batch 1)
    fixed = {vi.name: _fixed_leading(vi) for vi in inputs}
    unbatched = {
        name: (g.array.shape[0], batch)
        for name, g in fed.items()
        if batch is not None
        and g.array.ndim
        and g.array.shape[0] != batch
        and (took_batch or fixed[name] != g.array.shape[0])
    }
    return Binding(bound, rebatch, given=fed, not_inputs=not_inputs, unbatched=unbatched, exported=exported)


def given_dims(
    path: object,
    inputs: Iterable[onnx.ValueInfoProto],
    given: Mapping[str, GivenInput],
    dims: dict[str, int],
) -> None:
    """Check each given input against its model input (element type, rank) and add to ``dims`` (in place)
    the sizes its array gives the symbolic dimensions it has: they bind every other input that has them, before
    a batch size does (its array's shape wins for the input itself, as ``--shape``'s would).

    Raises:
        ModelError: a given input's element type or rank is not its model input's, or its sizes contradict
            ``--dim`` or another given input (one line each).
    """
    told: dict[str, str] = {}  # dimension name -> the given input that sized it
    for vi in inputs:
        if vi.name not in given:
            continue
        g, tt = given[vi.name], tensor_type_of(vi.type)
        flag = f"--input {vi.name} ({g.path})"
        want = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt is not None and tt.elem_type else None
        if want is not None and g.array.dtype != want:
            raise ModelError(
                path, f"{flag} holds {g.array.dtype} values, the input is {np.dtype(want).name}: save them as that"
            )
        if tt is None or not tt.HasField("shape"):
            continue
        if len(tt.shape.dim) != g.array.ndim:
            raise ModelError(path, f"{flag} has rank {g.array.ndim} but the input has rank {len(tt.shape.dim)}")
        for i, (d, size) in enumerate(zip(tt.shape.dim, g.array.shape, strict=True)):
            if not d.dim_param or (d.HasField("dim_value") and d.dim_value > 0):
                continue
            if d.dim_param in dims and dims[d.dim_param] != size:
                source = f"--input {told[d.dim_param]}" if d.dim_param in told else f"--dim {d.dim_param}"
                raise ModelError(
                    path,
                    f"{flag} is {size} in dimension {i} ('{d.dim_param}'), {source} makes it {dims[d.dim_param]}",
                )
            dims[d.dim_param] = size
            told[d.dim_param] = vi.name


@dataclass(frozen=True)
class _Unbound:
    """An input dimension nothing bound (``index`` None: the input has no shape at all)."""

    input: str
    index: int | None = None
    name: str = ""  # the dimension's symbolic name, if it has one
    needs: tuple[str, ...] = ()  # the names not bound that would bind it: itself, or those its expression reads

    def told(self) -> str:
        """As the sentence that states it."""
        if self.index is None:
            return f"input '{self.input}' has no shape"
        label = f" ('{self.name}')" if self.name else ""
        return f"input '{self.input}' dimension {self.index}{label} is not bound"

    def listed(self) -> str:
        """As one of the others a message lists after the first."""
        if self.index is None:
            return f"the shape of input '{self.input}'"
        where = f"input '{self.input}' dimension {self.index}"
        return f"'{self.name}' ({where})" if self.name else where

    def flags(self) -> list[str]:
        """The ways to bind it (flags that do it together), the most specific last."""
        if self.index is None:
            return [f"--shape {self.input}=DIMS"]
        ways = [" ".join(f"--dim {name}=N" for name in self.needs)] if self.needs else []
        return [*ways, f"--shape {self.input}=DIMS"]

    def flag(self) -> list[str]:
        """The one flag (or several, for a dimension named by an expression) to suggest among others (a free
        leading dimension is never unbound: the batch, 1 unless ``--batch`` is given)."""
        return [f"--dim {name}=N" for name in self.needs] or [f"--shape {self.input}=DIMS"]


def _names_in(param: str) -> list[str]:
    """The dimension names a symbolic dimension is made of: itself, or those its expression reads
    (``past_sequence_length + sequence_length``: ``dim_size``)."""
    if not param:
        return []
    try:
        tree = ast.parse(param, mode="eval")
    except SyntaxError:
        return [param]
    if isinstance(tree.body, ast.Name):
        return [param]
    names = [node.id for node in ast.walk(tree) if isinstance(node, ast.Name)]
    return list(dict.fromkeys(names)) or [param]


def _unbound_message(unbound: list[_Unbound]) -> str:
    """One line naming every dimension left unbound and the flags that bind them, so that one
    retry binds them all (an Optimum decoder leaves four names free, which one error at a time
    made four runs). A name free in several inputs (a KV cache's, one per layer) is named once, and a
    dimension named by an expression of names already named (an attention mask's) not at all."""
    distinct: list[_Unbound] = []
    seen: set[str] = set()
    for u in unbound:
        keys = set(u.needs) or {f"{u.input}:{u.index}"}
        if not keys <= seen:
            seen |= keys
            distinct.append(u)
    first, others = distinct[0], distinct[1:]
    if not others:
        return f"{first.told()}; pass {' or '.join(first.flags())}"
    flags = list(dict.fromkeys(f for u in distinct for f in u.flag()))
    nor = ", ".join(u.listed() for u in others[:-1]) + (" and " if len(others) > 1 else "") + others[-1].listed()
    shapes = " (or --shape INPUT=DIMS for each input)" if any(not f.startswith("--shape") for f in flags) else ""
    return f"{first.told()}, nor {'are' if len(others) > 1 else 'is'} {nor}; pass {' '.join(flags)}{shapes}"


def _declared(d: onnx.TensorShapeProto.Dimension, index: int) -> int | None:
    """The size the file fixes input dimension ``index`` to, or None where it leaves it free. A ``0`` is an empty
    dimension (a static export's prompt step over an empty KV cache: ONNX Runtime runs that size and no other),
    except a leading one: a batch of nothing is nothing to measure, so it is free (1, or ``--batch``)."""
    if not d.HasField("dim_value") or (index == 0 and d.dim_value == 0):
        return None
    return d.dim_value


def _runs_as_exported(inputs: list[onnx.ValueInfoProto], bound: Mapping[str, tuple[int, ...]]) -> bool:
    """Whether the file leaves an input dimension free (no shape, or a dimension without a size) and fixes
    none to another size than ``bound``'s (``Binding.exported``)."""
    free = False
    for vi in inputs:
        tt = tensor_type_of(vi.type)
        if tt is None or not tt.HasField("shape"):
            free = True
            continue
        for d, size in zip(tt.shape.dim, bound[vi.name], strict=True):
            if not d.HasField("dim_value"):
                free = True
            elif d.dim_value != size:  # a leading 0 too: ONNX Runtime runs the file at that batch only
                return False
    return free


def _refuse_inputs_larger_than_memory(
    path: object, inputs: list[onnx.ValueInfoProto], bound: Mapping[str, tuple[int, ...]]
) -> None:
    """``ModelError`` naming the first bound input whose own size exceeds physical memory."""

    physical = memory_bytes()
    if physical is None:
        return
    for vi in inputs:
        elem = tensor_type_of(vi.type).elem_type
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
            name, size = dtype.name, dtype.itemsize
        except (KeyError, TypeError, ValueError):  # an element type numpy does not name: count a byte
            name, size = onnx.TensorProto.DataType.Name(elem).lower(), 1
        dims = bound[vi.name]
        need = math.prod(dims) * size
        if need > physical:
            raise ModelError(
                path,
                f"input '{vi.name}' of {'x'.join(map(str, dims))} {name} needs {need / 2**30:.1f} GiB, "
                f"more than this machine's {physical / 2**30:.1f} GiB of memory",
            )


def apply_binding(model: onnx.ModelProto, binding: Binding, *, keep_branches: bool = False) -> onnx.ModelProto:
    """A copy of ``model`` with initializers as constants and inputs set to ``binding``; those it binds to
    a value made constants too (``steering.constant_inputs``), unless ``keep_branches``.

    Stale intermediate and output shapes are cleared so inference recomputes them, and
    nodes are sorted topologically: inference reads them in file order, and not every
    export is sorted.
    """
    m = copy.deepcopy(model)
    inits = {i.name for i in m.graph.initializer}
    keep = [i for i in m.graph.input if i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    nodes = list(m.graph.node)
    ordered = topological_nodes(nodes, inits | {i.name for i in keep})
    if any(a is not b for a, b in zip(ordered, nodes, strict=True)):
        ordered = [copy.deepcopy(n) for n in ordered]  # detached before the field is cleared
        del m.graph.node[:]
        m.graph.node.extend(ordered)
    if m.ir_version < 4:  # initializers outside graph inputs need IR >= 4
        m.ir_version = 4
    for vi in m.graph.input:
        dims = binding.shapes[vi.name]
        shape = tensor_type_of(vi.type).shape
        shape.ClearField("dim")
        for d in dims:
            shape.dim.add().dim_value = d
    for vi in m.graph.output:
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    del m.graph.value_info[:]
    if not keep_branches:
        constant_inputs(m, binding.shapes, binding.values)
    return m


def fold_and_infer(model: onnx.ModelProto, path: object) -> onnx.ModelProto:
    """Inline local functions, fold small constants, then infer all shapes."""
    return infer_shapes(fold_constants(model, path), path)


def fold_constants(model: onnx.ModelProto, path: object) -> onnx.ModelProto:
    """Inline local functions and fold small constants (onnxscript's optimizer, best effort)."""
    m = model
    if m.functions:
        from onnx import inliner

        m = inliner.inline_local_functions(m)
    try:
        import onnx_ir as ir
        from onnxscript.optimizer import fold_constants as fold

        ir_model = ir.from_proto(m)
        # a folded constant is what the model computes, infinities included (T5's relative position
        # buckets take the log of a 0): numpy's warnings about them were noise on every command's stderr
        with _quiet(_FOLDER_LOG), np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            fold(ir_model, onnx_shape_inference=True, should_fold=_should_fold)
        m = keep_on_file(m, without_orphans(ir.to_proto(ir_model), read_tensors(m)))
    except Exception as exc:  # the optimizer is best effort; inference below still runs
        if str(path) not in _UNFOLDED:  # one line per model, not one per time it is processed
            _UNFOLDED.add(str(path))
            log.warning(
                "%s: constant folding skipped, shapes inferred without it (onnxscript's optimizer: %s: %s)",
                path,
                type(exc).__name__,
                exc,
            )
    return m


_UNFOLDED: set[str] = set()  # models whose folding failed, already said


def read_tensors(model: onnx.ModelProto, nodes: Iterable[onnx.NodeProto] | None = None) -> set[str]:
    """The tensors something reads: a node (its subgraphs' captures included) or the graph's outputs.

    ``nodes``: these nodes of ``model`` instead of all of them.
    """
    nodes = model.graph.node if nodes is None else nodes
    return {x for node in nodes for x in node_reads(node)} | {o.name for o in model.graph.output}


def without_orphans(model: onnx.ModelProto, read_before: set[str]) -> onnx.ModelProto:
    """``model`` without the nodes that folding left unread: every output unread now, one read before; and without
    the initializers read before and unread now (what only those nodes read, or a value a rewrite replaced).

    Folding a no-op (a float32 ``Cast`` to float32 in a Llama RMSNorm) rewires its readers to
    the op's input and leaves behind an ``Identity`` nobody reads. Kept, it was a layer of its
    own and a second reader of its input, which split the RMSNorm into two units where ONNX
    Runtime fuses one. A node the model itself never read stays: ONNX Runtime runs it.
    """
    kept = list(model.graph.node)
    while True:
        read = read_tensors(model, kept)
        orphans = {
            id(n) for n in kept if not any(o in read for o in n.output) and any(o in read_before for o in n.output)
        }
        if not orphans:
            break
        kept = [n for n in kept if id(n) not in orphans]
    if len(kept) != len(model.graph.node):
        del model.graph.node[:]
        model.graph.node.extend(kept)
    inputs = {i.name for i in model.graph.input}  # an initializer listed as an input too (IR 3) stays: a default
    unread = {i.name for i in model.graph.initializer if i.name in read_before} - read - inputs  # only orphans read
    for k in reversed(range(len(model.graph.initializer)) if unread else ()):
        if model.graph.initializer[k].name in unread:
            del model.graph.initializer[k]
    return model


# The optimizer warns on the terminal for each node its reference evaluator cannot compute
# ("Evaluation failed: cannot reshape array of size 1 into shape (1,64)" for a dynamo-exported
# ALBERT's mask): that node stays unfolded, which is all the warning means, and shape
# inference and ONNX Runtime's own shapes (``resolve.py``) take it from there.
_FOLDER_LOG = "onnxscript.optimizer._constant_folding"


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Below errors, nothing from logger ``name`` while the block runs."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def infer_shapes(model: onnx.ModelProto, path: object) -> onnx.ModelProto:
    """ONNX shape inference with data propagation over the whole graph."""
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:
        raise ModelError(path, f"shape inference failed: {one_line(exc)}") from None


def _should_fold(node) -> bool | None:
    """onnxscript's ``should_fold``: never a node that reads a data-less (structure-only) tensor,
    always a short integer ``ConstantOfShape``, else the optimizer's own rules (None)."""
    policy = fold_policy(node)
    return policy if policy is not None else _fold_small_constant_of_shape(node)


def _fold_small_constant_of_shape(node) -> bool | None:
    """The optimizer's folding rule, plus ``ConstantOfShape`` of a short integer vector.

    The optimizer keeps every ``ConstantOfShape`` so as not to grow a model by a large filled
    tensor; a short integer one is part of a shape computation (TorchScript's ``Expand`` of a
    computed shape: ``Where(Equal(s, -1 * ConstantOfShape(...)), ..., s)``; ``F.pad``'s pads),
    which must fold for anything downstream to be shaped. Filled float tensors (weights, the
    zoo's stand-ins) stay nodes. None leaves every other node to the optimizer's own rules.
    """
    if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx") or not node.inputs:
        return None
    shape = node.inputs[0].const_value if node.inputs[0] is not None else None
    value = node.attributes.get("value")
    if shape is None or value is None or value.value.dtype.is_floating_point():
        return None  # no value attribute: float zeros
    try:
        numel = math.prod(int(d) for d in shape.numpy().ravel())
    except (TypeError, ValueError):
        return None
    return True if numel <= VALUE_MAX_ELEMENTS else None


@dataclass(frozen=True)
class PreparedModel:
    """A model bound, folded and shaped, with how it was shaped (``ShapeReport``)."""

    proto: onnx.ModelProto
    binding: Binding
    shapes: ShapeReport


def prepare(
    model: onnx.ModelProto,
    path: object,
    batch: int | None = None,
    request: BindingRequest = NO_REQUEST,
    *,
    fits_here: bool = True,
) -> tuple[onnx.ModelProto, Binding]:
    """``prepare_model``'s proto and binding."""
    prepared = prepare_model(model, path, batch, request, fits_here=fits_here)
    return prepared.proto, prepared.binding


def prepare_model(
    model: onnx.ModelProto,
    path: object,
    batch: int | None = None,
    request: BindingRequest = NO_REQUEST,
    *,
    keep_branches: bool = False,
    fits_here: bool = True,
) -> PreparedModel:
    """Bind, fold, infer and resolve what inference left; a rebatched model also gets what bakes its batch rewritten.

    Exports with a fixed batch hard-code it in ``Reshape`` and ``Expand`` targets (``[1, 9216]``, ``[4, 16, 16]``
    with the batch folded into the heads) and, at batch 1, concatenate a class token unexpanded: when ``batch``
    rewrites a fixed leading dimension, ``benanza.model.rebatch`` rewrites them. Shapes computed from ``Shape``
    chains adapt without help.

    An input that chooses an ``If``'s branch is bound to ``request.values``' value for it (``--value``) or
    the one it is fed, and the ``If`` folds to that branch (``benanza.model.steering``); with
    ``keep_branches`` the ``If`` stays and the input keeps that value as its default (an
    initializer it may be fed over, which ONNX Runtime does not fold): the model as it is shipped,
    for its end to end.
    """
    binding = bind_shapes(model, path, batch, request, fits_here=fits_here)
    binding = replace(binding, values=steered_values(model, path, binding.shapes, request.values, binding.given))
    if binding.rebatch:
        model = _rebatched(model, path, binding, batch, keep_branches=keep_branches)
    inferred = fold_and_infer(apply_binding(model, binding, keep_branches=keep_branches), path)
    from benanza.model.resolve import resolve_if_needed

    given = given_arrays(binding.given)
    if keep_branches:  # the run that shapes what the data decides takes the branch the values chose, as fed
        given = {**value_arrays(inferred, binding.shapes, binding.values), **given}
    resolved, report = resolve_if_needed(inferred, path, given=given)
    if keep_branches:
        default_inputs(resolved, binding.shapes, binding.values)
    return PreparedModel(resolved, binding, report)


def _fixed_leading(vi: onnx.ValueInfoProto) -> int | None:
    """The leading dimension an input's file fixes, None where it is symbolic, absent or the input a scalar."""
    tt = tensor_type_of(vi.type)
    dims = tt.shape.dim if tt is not None and tt.HasField("shape") else ()
    return dims[0].dim_value if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0 else None


def _rebatched(
    model: onnx.ModelProto, path: object, binding: Binding, batch: int, *, keep_branches: bool
) -> onnx.ModelProto:
    """``model`` with what its export bakes of its old batch rewritten to ``batch`` (``benanza.model.rebatch``)."""
    if model.functions:
        from onnx import inliner

        model = inliner.inline_local_functions(model)
    original = Binding(
        {n: (binding.rebatch[n][0], *s[1:]) if n in binding.rebatch else s for n, s in binding.shapes.items()},
        values=binding.values,
    )
    from benanza.model.resolve import resolve_if_needed

    at_original = fold_and_infer(apply_binding(model, original, keep_branches=keep_branches), path)
    at_original, _ = resolve_if_needed(at_original, path)  # what ONNX does not shape: a contrib op's outputs, after
    result = rebatched(model, at_original, binding.shapes, batch)
    for line in result.unresolved:
        if (str(path), batch, line) not in _SAID_UNRESOLVED:  # once, not again for the model's end to end
            _SAID_UNRESOLVED.add((str(path), batch, line))
            log.warning("%s: --batch %d: %s", path, batch, line)
    # what computed a value the rewrite replaced (a TorchScript export's ``Expand`` of a recurrent state it baked at
    # the old batch, which fails at the new one) is read no more: gone, not run
    return without_orphans(result.model, read_tensors(model))


_SAID_UNRESOLVED: set[tuple[str, int, str]] = set()
