"""A static export run at another batch: the shapes its graph bakes at the batch it was exported at, rewritten.

``torch.onnx.export(..., dynamo=True)`` without ``dynamic_shapes`` (its default) and TorchScript exports traced at a
fixed shape bake the batch they were traced at into constants: ``Reshape`` targets (``[1, 17, -1, 16]`` before
attention, ``[4, 16, 16]`` with the batch folded into the heads, ``[1, 4, 16, 16]`` unfolding it again), ``Expand``
targets (a ViT's class token expanded to ``[4, 1, 64]``) and, exported at batch 1, a class token concatenated to the
patches as it is (the exporter drops its ``Expand`` to 1). ``--batch N`` binds the inputs at ``N``; ONNX's shape
inference then shapes every layer upstream of the first such constant and fails, or shapes wrongly, after it.

``rebatched`` walks the graph once, in order, carrying each tensor's shape at the new batch (ONNX's per-node
inference does every op but a few) and, for a tensor the batch reaches, where the batch sits in it: the axis, and
within the axis how many elements each sample's digit spans inside it (``[B*H, S, D]``: the batch is the outer
factor of axis 0). Then, in the file's model:

* a ``Reshape``'s output takes the batch on the axis whose stride divides the batch digit's and which holds the
  whole digit (row-major order: ``[S, B, E] -> [S, B*H, D]`` scales ``B*H``, ``[B*H, S, S] -> [B, H, S, S]`` the
  ``B``, ``[S, B, E] -> [S*B, E]`` the ``S*B``; at batch 1, where any axis holds a digit of one, the axis where it is
  innermost); its target becomes that shape where the target as it is gives another one at the new input;
* an ``Expand`` whose input grew takes the input's new dimensions;
* a constant read by a broadcasting op or a ``Concat`` beside a tensor that grew along an axis, of that axis's old
  extent (an initializer, or what nodes of constants alone compute, run in ONNX Runtime: a class token's ``Expand``
  to the batch, token-type embeddings ``Gather``ed at a buffer expanded to it): its equal slices become one (a
  folded broadcast: it broadcasts again; the class token ``[B, 1, E]``, an attention mask of ones), its integer
  slices that step by one difference become as many as the new batch (indices counting the samples; the indices of
  a gather along the batch likewise); ``GatherElements`` data beside grown indices takes as many slices as the new
  batch (RoBERTa's token-type buffer); ``GatherND`` indices made at batch 1 that pick sample 0 become one grid per
  sample (transformers' mask ``mask[batch_idx, kv_idx]``);
* a ``Concat`` of grown tensors with one whose dimension is 1 where theirs grew: an ``Expand`` before the ``Concat``;
* an ``LSTM``, ``GRU`` or ``RNN`` whose sequence grew along its batch axis: an initial state or sequence lengths
  baked at the old batch with equal slices (PyTorch's zero ``h0``) become as many slices as the new batch, in place
  of what the file computes of them too (TorchScript ``Expand``s the baked state to a shape it reads off the
  input, which fails at another batch; the nodes that computed it, read no more, are dropped: ``shapes``).

What the file computes at run time (a target from ``Shape -> Gather -> Concat``, a mask from ``ConstantOfShape``)
is left: it follows the new batch by itself. What the walk cannot rewrite (a ``Reshape`` whose input grew along two
axes or no axis of which holds the batch, an ``Expand`` that broadcasts an axis the batch grew, a rewrite whose
node folding changed) is named in ``Rebatched.unresolved`` and left as exported; so is the first node the batch
reaches that neither ONNX's inference nor, for an op outside ONNX's domain (``MatMulNBits`` of an int4 export, the
fused ops of ONNX Runtime's transformer optimizer, QOperator int8's ``QLinearSoftmax``), ONNX Runtime's symbolic
inference or its own inference of a session of the node can shape (control flow, an op no runtime here knows), past
which only a ``Reshape`` target whose leading entry is the old batch is rewritten. QOperator int8's
``QLinearConcat``, ``QLinearAdd`` and ``QLinearMul`` are read as their float ops are, but a constant of theirs is
remade only where its slices are equal (its integers are quantized values, never indices counting the batch).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from benanza.model.constants import constant_value
from benanza.model.extract import schema_of, tensor_type_of
from benanza.model.load import has_data
from benanza.model.resolve import OneNode, constant_outputs
from benanza.model.walks import node_reads

Shape = tuple[int, ...]

# integer tensors up to this many elements are passed to ONNX's per-node inference as values (axes, pads, repeats,
# targets): what shape inference reads; weights are not
_VALUE_ELEMENTS = 64
# a constant the exporter broadcast to the old batch is read whole to compare its slices, up to this many elements
_SLICED_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Rebatched:
    """``model`` with what bakes the old batch rewritten; ``unresolved``: one line per node left as exported."""

    model: onnx.ModelProto
    unresolved: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Plan:
    old: Mapping[str, Shape]  # every tensor's shape at the old batch
    now: Mapping[str, Shape | None]  # the shapes the batch changed, at the new batch (None: not carried there)
    targets: dict[str, Shape]  # a Reshape's output -> the explicit target a shape not carried here still gets
    broadcasts: dict[tuple[str, int], Shape]  # (a Concat's output, its input's position) -> the shape to expand to
    slices: dict[tuple[str, int], np.ndarray]  # (a node's output, its input's position) -> the constant it reads
    # of ``slices``, those that replace what the file computes from its shapes too (a recurrent op's initial state)
    overrides: frozenset[tuple[str, int]]
    arity: dict[str, int]  # a node with a slice or a broadcast -> its inputs' count at the old batch
    unresolved: tuple[str, ...]


def rebatched(model: onnx.ModelProto, at_old: onnx.ModelProto, new_inputs: Mapping[str, Shape], new: int) -> Rebatched:
    """``model`` run at ``new_inputs`` (every rebatched input at batch ``new``), what bakes its old batch rewritten.

    ``at_old``: ``model`` bound at the shapes it was exported at, folded, its nodes in topological order and every
    tensor shaped by ONNX's inference. A node of ``model`` is found there by its first output's name (``_key``); what
    folding made constant is read there as the constant it is (a class token's ``Expand`` of a ``Where`` of shapes, in
    a TorchScript export) and rewritten in ``model`` where a node reads it.
    """
    plan = _Walk(at_old, new_inputs, new).plan()
    rewritten, missed = _rewritten(model, plan, new)
    unfound = tuple(
        f"node {out}'s rewrite for the new batch found no node of the file with that output and inputs (folding "
        "changed it); left as exported"
        for out in missed
    )
    return Rebatched(rewritten, plan.unresolved + unfound)


class _Walk:
    """One pass over ``at_old``'s nodes carrying each tensor's shape at the new batch."""

    def __init__(self, at_old: onnx.ModelProto, new_inputs: Mapping[str, Shape], new: int) -> None:
        self.model = at_old
        self.graph = at_old.graph
        self.opsets = {o.domain or "": o.version for o in at_old.opset_import}
        self.opset_imports = list(at_old.opset_import)
        self.ir_version = at_old.ir_version
        self.old, self.elem = _shapes_and_types(at_old)
        self.values = _small_integer_constants(at_old)
        self.live = _runtime_tensors(at_old)
        self.new = new
        self.olds = {self.old[n][0] for n, s in new_inputs.items() if self.old.get(n) and self.old[n] != tuple(s)}
        self.now: dict[str, Shape | None] = {n: tuple(s) for n, s in new_inputs.items()}
        # where the batch sits in a tensor it reached: (axis, old batch, elements of the axis per sample's digit)
        self.layout: dict[str, tuple[int, int, int]] = {
            n: (0, self.old[n][0], 1)
            for n, s in self.now.items()
            if self.old.get(n) and s and s != self.old[n] and s[1:] == self.old[n][1:]
        }
        self.producer = {o: n for n in self.graph.node for o in n.output if o}
        self.evaluated: dict[str, np.ndarray | None] = {}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.graph.node:
            for x in node_reads(node):
                self.readers.setdefault(x, []).append(node)
        self.arity: dict[str, int] = {}
        self.lost: str | None = None  # the first node the batch reached that the walk could not shape
        self.guessed = 0  # Reshapes past it whose leading old batch was taken for the batch
        self.targets: dict[str, Shape] = {}
        self.broadcasts: dict[tuple[str, int], Shape] = {}
        self.slices: dict[tuple[str, int], np.ndarray] = {}
        self.overrides: set[tuple[str, int]] = set()
        self.unresolved: list[str] = []
        self.constants: dict[str, onnx.TensorProto | onnx.NodeProto] = {i.name: i for i in self.graph.initializer}
        self.constants.update((n.output[0], n) for n in self.graph.node if n.op_type == "Constant" and n.output)

    def plan(self) -> _Plan:
        for node in self.graph.node:
            if not any(x in self.now or x in self.live for x in node_reads(node)):
                continue  # a constant: made at the new batch where it meets the batch (``_unfolded``)
            if all(self._at_new(x) == self.old.get(x) and self.now.get(x, ()) is not None for x in node_reads(node)):
                self._same(node)  # nothing the batch changed reaches it
            elif (node.op_type, "" if node.domain == "ai.onnx" else node.domain) in _RECURRENT:
                self._recurrent(node)
            elif node.op_type == "QLinearConcat" and node.domain == "com.microsoft":  # QOperator int8's Concat
                self._concat(node, self._unfolded(node), positions=range(2, len(node.input), 3))
            elif node.domain not in ("", "ai.onnx"):
                self._infer(node, self._unfolded(node))
            elif node.op_type in ("Reshape", "Flatten"):
                self._reshape(node)
            elif node.op_type == "Expand":
                self._expand(node)
            elif node.op_type == "Concat":
                self._concat(node, self._unfolded(node))
            else:
                self._infer(node, self._unfolded(node))
        if self.lost is not None and self.guessed:
            self.unresolved.append(
                f"the new batch's shapes are not carried past node {self.lost} (neither ONNX's inference nor ONNX "
                f"Runtime's shapes it there): {self.guessed} Reshape target(s) after it whose "
                "leading entry is the old batch were rewritten to the new one, nothing else of what the export bakes "
                "of its batch"
            )
        return _Plan(
            self.old,
            self.now,
            self.targets,
            self.broadcasts,
            self.slices,
            frozenset(self.overrides),
            self.arity,
            tuple(self.unresolved),
        )

    def _at_new(self, name: str) -> Shape | None:
        """A tensor's shape at the new batch: None where the walk could not carry it there."""
        if name in self.now:
            return self.now[name]
        return None if name in self.live else self.old.get(name)

    def _same(self, node: onnx.NodeProto) -> None:
        for o in node.output:
            if o:
                self.now[o] = self.old.get(o)

    def _unknown(self, node: onnx.NodeProto) -> None:
        if self.lost is None and any(self.now.get(x) not in (None, self.old.get(x)) for x in node_reads(node)):
            self.lost = f"{node.name or _key(node)} ({node.op_type})"  # the first the batch reached, unshaped
        for o in node.output:
            if o:
                self.now[o] = None

    def _reshape(self, node: onnx.NodeProto) -> None:
        """A ``Reshape`` (or a ``Flatten``, the same in memory) of a tensor the batch reached."""
        x, out = node.input[0], node.output[0]
        before, after, shaped = self.old.get(x), self._at_new(x), self.old.get(out)
        target = node.input[1] if node.op_type == "Reshape" and len(node.input) > 1 else ""
        if before is None or shaped is None or after is None:  # not carried here: a leading old batch is the batch
            given = self.values.get(target)
            leading = [int(v) for v in numpy_helper.to_array(given).ravel()] if given is not None else []
            kept = before is None or before[:1] == tuple(leading[:1])  # the input's leading dimension, where known
            if x in self.live and leading and leading[0] in self.olds and leading[0] != self.new and kept:
                self.targets[out] = (self.new, *leading[1:])
                self.guessed += 1
            return self._unknown(node)
        layout = self.layout.get(x)
        if after is not None and layout is None:
            self.unresolved.append(
                f"node {node.name or out} ({node.op_type}) of {list(before)} to {list(shaped)}: its input is "
                f"{list(after)} at the new batch, grown along more than one axis; left as exported"
            )
            return self._unknown(node)
        moved = self._chosen(out, before, after, layout, shaped)
        if moved is None:
            self.unresolved.append(
                f"node {node.name or out} ({node.op_type}) of {list(before)} to {list(shaped)}: its input is "
                f"{list(after)} at the new batch and no axis of its output holds the batch; left as exported"
            )
            return self._unknown(node)
        j, inner, self.now[out] = moved
        self.layout[out] = (j, layout[1], inner)

    def _chosen(
        self, out: str, before: Shape, after: Shape, layout: tuple[int, int, int], shaped: Shape
    ) -> tuple[int, int, Shape] | None:
        """``_moved``'s first axis whose shape every reader of ``out`` that the walk can shape accepts (at batch 1
        ``[S, 1, E] -> [S, E]`` is ``[S*B, E]`` before a ``MatMul`` by ``[E, E]``, not ``[S, B*E]``)."""
        a, batch, _ = layout
        new_batch = after[a] * batch // before[a]
        chosen = None
        for j, inner in _moved(before, layout, shaped):
            shape = (*shaped[:j], shaped[j] // batch * new_batch, *shaped[j + 1 :])
            chosen = chosen or (j, inner, shape)
            if all(self._accepts(reader, out, shape) for reader in self.readers.get(out, ())):
                return j, inner, shape
        return chosen

    def _accepts(self, node: onnx.NodeProto, name: str, shape: Shape) -> bool:
        """Whether ONNX's inference of ``node`` accepts ``name`` at ``shape`` (True where it cannot tell)."""
        schema = self._schema(node)
        if schema is None or _has_subgraph(node):
            return True
        types = {}
        for x in node.input:
            given = shape if x == name else self._at_new(x)
            if not x:
                continue
            if given is None or x not in self.elem:
                return True  # an input not carried yet: nothing to tell
            types[x] = helper.make_tensor_type_proto(self.elem[x], given)
        data = {x: self.values[x] for x in node.input if x in self.values}
        try:
            onnx.shape_inference.infer_node_outputs(
                schema, node, types, data, opset_imports=self.opset_imports, ir_version=self.ir_version
            )
        except Exception:
            return False
        return True

    def _schema(self, node: onnx.NodeProto) -> onnx.defs.OpSchema | None:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        described = schema_of(node.op_type, self.opsets.get(domain, 0), domain)
        return described.onnx_schema if described is not None else None

    def _expand(self, node: onnx.NodeProto) -> None:
        x, out = node.input[0], node.output[0]
        before, after, shaped = self.old.get(x), self._at_new(x), self.old.get(out)
        target = node.input[1] if len(node.input) > 1 else ""
        if before is None or shaped is None or after is None or target in self.live:
            if after == before and target not in self.live:
                return self._same(node)
            return self._unknown(node)  # a target the model computes follows its shapes: not carried here
        want = list(shaped)
        offset = len(shaped) - len(before)
        if after != before:
            for k, (b, a) in enumerate(zip(before, after, strict=True)):
                if b == a or offset + k < 0:
                    continue
                if shaped[offset + k] != b:  # it broadcast this axis (1 -> K): K beams per sample has no new target
                    self.unresolved.append(
                        f"node {node.name or out} (Expand) of {list(before)} to {list(shaped)}: it broadcasts the "
                        f"axis the batch grew ({b} -> {a}); left as exported"
                    )
                    return self._unknown(node)
                want[offset + k] = a
        self.now[out] = tuple(want)
        self._carry_layout(node)

    def _unfolded(self, node: onnx.NodeProto) -> list[Shape | None]:
        """The node's inputs' shapes at the new batch, each constant that its exporter made at the old batch made
        at the new one (``_unbaked``), along an axis whose extent, the old batch, grew in another input: the same
        axis counted from the last (the axes broadcasting aligns) or, of indices that pick samples, the leading one.

        A static export folds ``cls_token.expand(B, -1, -1)`` into a ``[B, 1, E]`` constant, an attention mask of ones
        into ``[B, 1, S, S]`` and a mask's gather into ``[B, 1, 1, S, 2]`` indices counting the batch: at another
        batch they no longer broadcast or index, or broadcast wrongly (``[4, 1, S, S]`` beside ``[1, H, S, S]`` at
        batch 1 gives ``[4, H, S, S]``)."""
        from_last: dict[int, tuple[int, int]] = {}  # an axis counted from the last -> (old extent, new extent)
        leading: dict[int, int] = {}  # a grown leading axis's old extent -> its new
        for x in node.input:
            before, after = self.old.get(x), self._at_new(x)
            if before is None or after is None or len(before) != len(after) or before == after:
                continue
            for k, (b, a) in enumerate(zip(before, after, strict=True)):
                if b != a:
                    from_last[len(before) - k] = (b, a)
            if before and before[0] != after[0]:
                leading[before[0]] = after[0]
        shapes = [self._at_new(x) if x else None for x in node.input]
        if node.op_type not in _BROADCASTING and node.op_type not in _GATHERS:
            return shapes  # a setting (axes, pads, repeats) as long as the old batch is no batch
        for i, x in enumerate(node.input):
            shape = shapes[i]
            if not x or x in self.live or x in self.now or not shape:
                continue
            axes = {len(shape) - back: grew for back, grew in from_last.items() if back <= len(shape)}
            if node.op_type in ("Gather", "GatherND"):
                axes = {}  # a gather's data is read, not broadcast; its indices follow
            if shape[0] in leading and i == 1 and _indexes_the_batch(node):  # indices: their leading axis
                axes.setdefault(0, (shape[0], leading[shape[0]]))
            value = None
            if node.op_type == "GatherND" and i == 1 and shape[0] == 1 and 1 in leading:
                value = _index_grid(self._constant(x), leading[1], _int_attr(node, "batch_dims", 0))
            for k, (b, a) in sorted(axes.items()):
                tiled = node.op_type == "GatherElements" and i == 0  # its data: as long as its indices, at least
                if (b < 2 and not tiled) or shape[k] != b:
                    continue
                value = self._constant(x) if value is None else value
                counts = node.op_type not in _QUANTIZED_BROADCASTING
                made = _unbaked(value, k, b, a, counts=counts) if value is not None else None
                if made is not None and made.shape[k] == 1 and tiled:
                    made = np.repeat(made, a, axis=k)
                if made is not None:
                    value = made
            if value is not None and tuple(value.shape) != shape:
                self.slices[(_key(node), i)] = value
                self.arity[_key(node)] = len(node.input)
                shapes[i] = tuple(value.shape)
        return shapes

    def _constant(self, name: str) -> np.ndarray | None:
        """The value of a constant of up to ``_SLICED_ELEMENTS``: an initializer, a ``Constant`` node's output, or
        what nodes of constants alone compute that folding left (a class token's ``Expand`` to the batch, the
        token-type embeddings ``Gather``ed at it), computed by ONNX's reference evaluator; else None."""
        tensor = self.constants.get(name)
        if isinstance(tensor, onnx.NodeProto):
            return _constant_value(tensor)
        if tensor is not None:
            fits = has_data(tensor) and math.prod(tensor.dims) <= _SLICED_ELEMENTS
            return numpy_helper.to_array(tensor) if fits else None
        shape = self.old.get(name)
        if name in self.live or name not in self.producer or shape is None or math.prod(shape) > _SLICED_ELEMENTS:
            return None
        if name not in self.evaluated:  # once, however many nodes read it (a mask every layer adds)
            self.evaluated[name] = self._evaluated(name)
        return self.evaluated[name]

    def _evaluated(self, name: str) -> np.ndarray | None:
        nodes, seen, stack = [], set(), [name]
        while stack:  # the constant's ancestors
            node = self.producer.get(stack.pop())
            if node is None or id(node) in seen:
                continue
            if _has_subgraph(node):
                return None
            seen.add(id(node))
            nodes.append(node)
            stack.extend(x for x in node.input if x)
        order = {id(n): i for i, n in enumerate(self.graph.node)}
        nodes.sort(key=lambda n: order[id(n)])
        read = {x for n in nodes for x in n.input if x}
        inits = [i for i in self.graph.initializer if i.name in read]
        if any(not has_data(i) or math.prod(i.dims) > _SLICED_ELEMENTS for i in inits):
            return None
        output = helper.make_tensor_value_info(name, self.elem.get(name, 0), None)
        graph = helper.make_graph(nodes, "constant", [], [output], inits)
        model = helper.make_model(graph, opset_imports=self.opset_imports, ir_version=self.ir_version)
        values = constant_outputs(model, f"the constant {name!r} at the old batch")
        return np.asarray(values[0]) if values else None

    def _concat(self, node: onnx.NodeProto, shapes: list[Shape | None], positions: Sequence[int] = ()) -> None:
        """A ``Concat`` (``positions``: the inputs it concatenates, where not all: a ``QLinearConcat``'s tensors,
        each followed by its scale and zero point)."""
        positions = positions or range(len(node.input))
        data = [shapes[i] for i in positions]
        olds = [self.old.get(node.input[i]) for i in positions]
        if any(s is None for s in data) or any(s is None for s in olds) or len({len(s) for s in data}) != 1:
            return self._infer(node, shapes)
        rank = len(data[0])
        axis = _int_attr(node, "axis", 0) % rank if rank else 0
        carried = [node.input[i] in self.live or node.input[i] in self.now for i in positions]
        grown = [s for s, o, c in zip(data, olds, carried, strict=True) if c and s != o]
        if not grown:
            return self._infer(node, shapes)
        for i, s, old, c in zip(positions, data, olds, carried, strict=True):
            if c and s != old:
                continue
            to = tuple(w if k != axis and d == 1 else d for k, (d, w) in enumerate(zip(s, grown[0], strict=True)))
            if to != s:
                self.broadcasts[(_key(node), i)] = to
                self.arity[_key(node)] = len(node.input)
                shapes[i] = to
        self._infer(node, shapes)

    def _recurrent(self, node: onnx.NodeProto) -> None:
        """An ``LSTM``, ``GRU`` or ``RNN`` (or ``quantize_dynamic``'s ``DynamicQuantizeLSTM``) whose sequence grew along
        its batch axis: its initial states and sequence lengths, read whole per sample (never broadcast), made at the
        new batch where the export baked them at the old one (PyTorch's exporters fold the zero state ``h0`` of
        ``[directions, B, hidden]`` into a constant): as many slices as the new batch where its old ones are equal.
        Else the node is left as exported, and that is said: a state of its own per sample, one not read here, or
        one the model computes from its inputs that keeps the old batch (a streaming model's ``h0`` input)."""
        layout = _int_attr(node, "layout", 0)
        x = node.input[0]
        axis = 1 if layout == 0 else 0  # X: [seq, batch, input], or [batch, seq, input] with layout 1
        before, after = self.old.get(x), self._at_new(x)
        shapes = [self._at_new(i) if i else None for i in node.input]
        if before is None or after is None or len(before) != 3 or len(after) != 3 or before[axis] == after[axis]:
            return self._infer(node, shapes)
        old, new = before[axis], after[axis]
        # sequence_lens [batch]; initial_h (and an LSTM's initial_c): [directions, batch, hidden], or with layout 1
        # [batch, directions, hidden]
        per_sample = {4: 0, 5: axis, 6: axis} if "LSTM" in node.op_type else {4: 0, 5: axis}
        made: dict[int, np.ndarray] = {}
        for i, k in per_sample.items():
            name = node.input[i] if i < len(node.input) else ""
            shape = shapes[i] if name else None
            if not name or not shape or len(shape) <= k or shape[k] != old:
                continue  # absent, or not of the old batch (a state computed from the sequence follows it)
            if name in self.live or name in self.now:
                why = "comes from the model's inputs and keeps the old batch"
            else:
                value = self._constant(name)
                one = _unbaked(value, k, old, 1, counts=False) if value is not None else None
                if one is not None:
                    made[i] = np.repeat(one, new, axis=k)
                    continue
                why = "is not read here" if value is None else "holds its own value per sample of the old batch"
            self.unresolved.append(
                f"node {node.name or _key(node)} ({node.op_type}): its input {name!r} of {list(shape)} {why} "
                f"({old}, on axis {k}); left as exported"
            )
            return self._unknown(node)
        for i, value in made.items():
            self.slices[(_key(node), i)] = value
            # what the file computes of it is replaced too: a TorchScript export expands a zero state it baked at the
            # old batch to a shape it computes (``Expand`` of ``[2, B, H]`` to ``[2, B', H]`` fails or keeps ``B``)
            self.overrides.add((_key(node), i))
            self.arity[_key(node)] = len(node.input)
            shapes[i] = tuple(value.shape)
        self._infer(node, shapes)

    def _infer(self, node: onnx.NodeProto, shapes: Sequence[Shape | None] | None = None) -> None:
        """ONNX's per-node inference at the inputs' new shapes (``shapes``: the node's inputs', where changed)."""
        if _has_subgraph(node):
            return self._unknown(node)  # a subgraph reads what its body computes: not carried through
        schema = self._schema(node)
        given = dict(zip(node.input, shapes, strict=False)) if shapes is not None else {}
        types = {}
        for x in node.input:
            if not x:
                continue
            shape = given.get(x, self._at_new(x))
            if shape is None or x not in self.elem:
                return self._unknown(node)
            types[x] = helper.make_tensor_type_proto(self.elem[x], shape)
        if schema is None:  # an op outside ONNX's domains (a contrib op): ONNX Runtime's inference
            return self._infer_symbolic(node, {x: (given.get(x, self._at_new(x)), self.elem[x]) for x in types})
        data = {x: self.values[x] for x in node.input if x in self.values}
        try:
            inferred = onnx.shape_inference.infer_node_outputs(
                schema, node, types, data, opset_imports=self.opset_imports, ir_version=self.ir_version
            )
        except Exception:  # ONNX's inference refuses the node at these shapes: not carried past it
            return self._unknown(node)
        for o in node.output:
            if not o:
                continue
            tensor = tensor_type_of(inferred[o]) if o in inferred else None
            dims = tensor.shape.dim if tensor is not None and tensor.HasField("shape") else None
            known = dims is not None and all(d.HasField("dim_value") for d in dims)
            self.now[o] = tuple(d.dim_value for d in dims) if known else None
        self._carry_layout(node)

    def _infer_symbolic(self, node: onnx.NodeProto, inputs: Mapping[str, tuple[Shape, int]]) -> None:
        """ONNX Runtime's symbolic inference of an op ONNX has no schema for (``MatMulNBits`` of an int4 export,
        the fused ``Attention`` and ``SkipLayerNormalization`` of ONNX Runtime's transformer optimizer), else its
        own inference of a session of the node (QOperator int8's ``QLinearSoftmax``)."""
        outputs = [o for o in node.output if o]
        values = {  # a constant the walk remade at the new batch (``_unfolded``) has its new shape in ``inputs``
            x: numpy_helper.to_array(self.values[x])
            for x in inputs
            if x in self.values and tuple(self.values[x].dims) == tuple(inputs[x][0])
        }
        one = OneNode(node, inputs, values, self.model)
        found = one.symbolic_shapes(outputs)
        if any(found.get(o) is None for o in outputs):  # no rule there: ONNX Runtime's own, as it makes a session
            found = one.session_shapes(outputs)
        if any(found.get(o) is None for o in outputs):
            return self._unknown(node)
        for o in outputs:
            self.now[o] = found[o][0]
            self.elem.setdefault(o, found[o][1])
        self._carry_layout(node)

    def _carry_layout(self, node: onnx.NodeProto) -> None:
        """Where the batch sits in each output the batch grew along one axis: as in the input whose axis of that
        extent grew (the same axis moved: a transpose, a squeeze), else the outer factor of the axis."""
        grown = [self.layout[x] + (self.old[x],) for x in node.input if x in self.layout]
        if not grown:
            return
        for o in node.output:
            before, after = self.old.get(o), self.now.get(o)
            if not o or before is None or after is None or len(before) != len(after):
                continue
            changed = [k for k, (b, a) in enumerate(zip(before, after, strict=True)) if b != a]
            if len(changed) != 1:
                continue
            k = changed[0]
            same = next(((batch, inner) for a, batch, inner, shape in grown if shape[a] == before[k]), None)
            batch = grown[0][1]
            if same is not None:
                self.layout[o] = (k, *same)
            elif before[k] % batch == 0:
                self.layout[o] = (k, batch, before[k] // batch)


def _unbaked(value: np.ndarray, axis: int, old: int, new: int, *, counts: bool = True) -> np.ndarray | None:
    """A constant made along ``axis`` at the old batch, at the new: one slice where its ``old`` slices are equal
    (a broadcast folded; it broadcasts again), ``new`` slices where an integer one steps by the same difference
    from slice to slice (an index counting the batch; not where ``counts`` is False: quantized data, whose integers
    are values, not indices); None for any other constant (data of its own per sample)."""
    slices = np.split(value, old, axis=axis)
    if all(np.array_equal(s, slices[0]) for s in slices[1:]):
        return slices[0]
    if value.dtype.kind not in "iu" or not counts:
        return None
    step = slices[1] - slices[0]
    if not all(np.array_equal(s, slices[0] + j * step) for j, s in enumerate(slices)):
        return None
    if old == 2 and step.ndim and not np.all(step == step.reshape(-1, step.shape[-1])[:1].reshape(-1)):
        return None  # two rows always step by their difference: only one step at every position counts them
    return np.concatenate([slices[0] + j * step for j in range(new)], axis=axis).astype(value.dtype)


def _key(node: onnx.NodeProto) -> str:
    """How the walk's plan names a node of the file: its first output that is there (an ``LSTM`` may leave out
    ``Y``, its first)."""
    return next((o for o in node.output if o), "")


def _indexes_the_batch(node: onnx.NodeProto) -> bool:
    """Whether a gather's indices pick along its data's leading axis, their own leading axis the output's."""
    if node.op_type == "Gather":
        return _int_attr(node, "axis", 0) == 0
    return node.op_type == "GatherND" and _int_attr(node, "batch_dims", 0) == 0


def _index_grid(value: np.ndarray | None, new: int, batch_dims: int) -> np.ndarray | None:
    """``GatherND`` indices made at batch 1 that pick sample 0 of the data for sample 0 (``mask[batch_idx, kv_idx]``
    traced with ``batch_idx = arange(1)``), made for ``new`` samples each picking its own; None for other indices."""
    if value is None or batch_dims or value.ndim < 2 or value.shape[0] != 1 or value.dtype.kind not in "iu":
        return None
    if np.any(value[..., 0] != 0):
        return None
    step = np.zeros(value.shape[-1], value.dtype)
    step[0] = 1
    return np.concatenate([value + j * step for j in range(new)], axis=0)


def _moved(before: Shape, layout: tuple[int, int, int], shaped: Shape) -> list[tuple[int, int]]:
    """The output axes of a ``Reshape`` of ``before`` to ``shaped`` that can hold the batch, each with its elements
    per sample's digit there, the likeliest first; none where no axis holds the whole digit.

    ``layout``: the input's batch axis, old batch and elements per digit in it. In row-major order the batch is a
    digit of stride ``sigma`` and extent ``batch``; an output axis of stride ``R`` holds it where ``R`` divides
    ``sigma`` and the digit's span divides the axis's. At batch 1 several can (a digit of one fits anywhere): first
    the axes after exactly what is above the digit in the input (``[S, 1, E] -> [S, H, D]``: ``B*H``), then the
    one where it is innermost.
    """
    a, batch, inner = layout
    sigma = inner * math.prod(before[a + 1 :])
    above = math.prod(before) // (sigma * batch)
    held = []
    for j, d in enumerate(shaped):
        stride = math.prod(shaped[j + 1 :])
        if stride and sigma % stride == 0 and (stride * d) % (sigma * batch) == 0:
            held.append((math.prod(shaped[:j]) != above, sigma // stride, j))
    return [(j, inner_out) for _, inner_out, j in sorted(held)]


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def _resolved(target: onnx.TensorProto | None, x: Shape, allowzero: bool) -> Shape | None:
    """What a constant Reshape target gives at input shape ``x``: -1 and 0 resolved; None where unknown or invalid."""
    if target is None:
        return None
    t = [int(v) for v in numpy_helper.to_array(target).ravel()]
    dims = [x[k] if v == 0 and not allowzero and k < len(x) else v for k, v in enumerate(t)]
    if dims.count(-1) > 1:
        return None
    if -1 in dims:
        rest = math.prod(d for d in dims if d != -1)
        if rest == 0 or math.prod(x) % rest:
            return None
        dims[dims.index(-1)] = math.prod(x) // rest
    return tuple(dims) if math.prod(dims) == math.prod(x) else None


def _resolved_expand(target: onnx.TensorProto | None, x: Shape) -> Shape | None:
    """What a constant Expand target gives at input shape ``x`` (ONNX broadcasting); None where unknown or invalid."""
    if target is None:
        return None
    t = [int(v) for v in numpy_helper.to_array(target).ravel()]
    try:
        return tuple(np.broadcast_shapes(tuple(x), tuple(t)))
    except ValueError:
        return None


def _allowzero(node: onnx.NodeProto) -> bool:
    return bool(_int_attr(node, "allowzero", 0))


def _int_attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def _rewritten(model: onnx.ModelProto, plan: _Plan, new: int) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` with what the plan rewrites; and the outputs, in order, of the planned nodes it did not find
    (or found with other inputs than where the plan was made).

    A ``Reshape``'s or ``Expand``'s target the file holds as a constant becomes the shape the walk carried its output
    to, where the target as it is gives another at the new input (one that folding made an ``Identity`` included); a
    target, a constant read or a ``Concat`` input the file computes at run time is left: it follows by itself.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    names = {i.name for i in m.graph.initializer}
    computed = _runtime_tensors(m)
    values = _small_integer_constants(m)

    def initializer(name: str, value: np.ndarray) -> str:
        if name not in names:
            names.add(name)
            m.graph.initializer.append(numpy_helper.from_array(value, name))
        return name

    slices, broadcasts = _by_reader(plan.slices), _by_reader(plan.broadcasts)
    nodes, missed = [], []
    for node in m.graph.node:
        out = _key(node)
        target = _new_target(node, plan, values, computed)
        if target is not None:
            node.input[1] = initializer(f"{out}__benanza_batch{new}_shape", np.array(target, np.int64))
        if (out in slices or out in broadcasts) and len(node.input) != plan.arity[out]:
            missed.append(out)  # folding dropped an input (an empty one of a Concat): positions no longer match
            slices.pop(out, None)
            broadcasts.pop(out, None)
        for position, value in slices.get(out, {}).items():
            if node.input[position] not in computed or (out, position) in plan.overrides:
                made = f"{node.input[position]}__benanza_batch{new}_{'x'.join(map(str, value.shape))}"
                node.input[position] = initializer(made, value)
        for position, to in broadcasts.get(out, {}).items():
            if node.input[position] in computed:
                continue
            expanded = f"{out}__benanza_batch{new}_input{position}"
            shape = initializer(f"{expanded}_shape", np.array(to, np.int64))
            nodes.append(helper.make_node("Expand", [node.input[position], shape], [expanded], name=expanded))
            node.input[position] = expanded
        nodes.append(node)
    if len(nodes) != len(m.graph.node):
        nodes = [copy.deepcopy(n) for n in nodes]  # detached before the field is cleared
        del m.graph.node[:]
        m.graph.node.extend(nodes)
    found = {_key(n) for n in nodes}
    planned = dict.fromkeys([*plan.targets, *(r for r, _ in plan.slices), *(r for r, _ in plan.broadcasts)])
    return m, missed + [out for out in planned if out not in found]


def _new_target(
    node: onnx.NodeProto, plan: _Plan, values: Mapping[str, onnx.TensorProto], computed: set[str]
) -> Shape | None:
    """The explicit target a ``Reshape`` or ``Expand`` of the file gets at the new batch; None to leave it."""
    if node.op_type not in ("Reshape", "Expand") or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return None
    out, x, target = node.output[0], node.input[0], node.input[1]
    if target in computed:
        return None  # the file computes it from its shapes: it follows the new batch
    want = plan.targets.get(out) or plan.now.get(out)
    if want is None or want == plan.old.get(out):
        return None
    given = plan.now.get(x) or plan.old.get(x)
    if given is not None and target in values:
        gives = (
            _resolved(values[target], given, _allowzero(node))
            if node.op_type == "Reshape"
            else _resolved_expand(values[target], given)
        )
        if gives == want:
            return None  # a -1 or a 0 that follows the input
    return want


def _by_reader(planned: Mapping[tuple[str, int], object]) -> dict[str, dict[int, object]]:
    out: dict[str, dict[int, object]] = {}
    for (reader, position), value in planned.items():
        out.setdefault(reader, {})[position] = value
    return out


def _shapes_and_types(model: onnx.ModelProto) -> tuple[dict[str, Shape], dict[str, int]]:
    """Every tensor's fully known shape and every tensor's element type, as inference left them."""
    shapes: dict[str, Shape] = {}
    elem: dict[str, int] = {}
    graph = model.graph
    for vi in (*graph.input, *graph.value_info, *graph.output):
        tensor = tensor_type_of(vi.type)
        if tensor is None:
            continue
        if tensor.elem_type:
            elem[vi.name] = tensor.elem_type
        if tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in tensor.shape.dim)
    for init in graph.initializer:
        shapes[init.name], elem[init.name] = tuple(init.dims), init.data_type
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = _constant_value(node)
            if value is not None:
                shapes.setdefault(node.output[0], tuple(value.shape))
                elem.setdefault(node.output[0], helper.np_dtype_to_tensor_dtype(value.dtype))
    return shapes, elem


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """A ``Constant`` node's value; None where it has none to read (its data in a file not here)."""
    if any(a.name == "value" and not has_data(a.t) for a in node.attribute):
        return None
    try:
        return constant_value(node)
    except Exception:  # a value ONNX cannot read here: unknown, as a weight without its data
        return None


def _small_integer_constants(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Initializers and ``Constant`` outputs of at most ``_VALUE_ELEMENTS`` integers, by name."""
    out: dict[str, onnx.TensorProto] = {}
    for init in model.graph.initializer:
        if init.data_type in _INTEGER_ELEMENTS and math.prod(init.dims) <= _VALUE_ELEMENTS and has_data(init):
            out[init.name] = init
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            value = _constant_value(node)
            if value is not None and value.dtype.kind in "iu" and value.size <= _VALUE_ELEMENTS:
                out[node.output[0]] = numpy_helper.from_array(value, node.output[0])
    return out


# ops that read a constant beside indices: a gather's indices, and ``GatherElements``' data of the indices' rank
_GATHERS = frozenset({"Gather", "GatherND", "GatherElements"})
# ops whose inputs broadcast against each other (or concatenate): where a constant made at the old batch meets
# a tensor that grew
_BROADCASTING = frozenset(
    {
        *("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "PRelu", "Where", "MatMul"),
        *("Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "BitShift", "Concat"),
        *("BitwiseAnd", "BitwiseOr", "BitwiseXor"),
    }
)
# com.microsoft's of QOperator int8, read as their float ops (their scales and zero points: scalars); their integers
# are quantized values, never indices counting the batch
_QUANTIZED_BROADCASTING = frozenset({"QLinearConcat", "QLinearAdd", "QLinearMul"})
# ops that read a state per sample: ``_recurrent``
_RECURRENT = frozenset({("LSTM", ""), ("GRU", ""), ("RNN", ""), ("DynamicQuantizeLSTM", "com.microsoft")})
_BROADCASTING |= _QUANTIZED_BROADCASTING

_INTEGER_ELEMENTS = frozenset(
    (onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8)
)


def _runtime_tensors(model: onnx.ModelProto) -> set[str]:
    """Tensors computed from a runtime input; every other tensor is a constant."""
    inits = {i.name for i in model.graph.initializer}
    live = {i.name for i in model.graph.input if i.name not in inits}
    changed = True
    while changed:  # one pass for a sorted graph; repeats cover unsorted exports
        changed = False
        for node in model.graph.node:
            outs = [o for o in node.output if o]
            if any(x in live for x in node_reads(node)) and not live.issuperset(outs):
                live.update(outs)
                changed = True
    return live
