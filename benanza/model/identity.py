"""A model's identity: one key over its whole prepared graph.

End-to-end results are stored under this key, so two models may share it only when ONNX
Runtime would run the same computation on them. It covers every node, not only the layers:
a model with a ``Loop`` that is not a layer must never take the end-to-end result of the model made
of its other layers.

The fields (``graph_fields``), in the model's topological node order:

- ``inputs``: shape and dtype of each runtime input, in order.
- ``nodes``: a node that is a layer is its layer key (op type, domain, input and output
  shapes and dtypes, normalised attributes, small integer constants by value; see
  ``benanza.model.keys``; a control-flow layer's key covers its subgraphs, and its entry adds
  ``captures``: where each outer tensor its subgraphs read comes from). Any other node (a
  ``Loop`` whose iterations are not fixed, an op without a schema, a node with an unknown
  shape, a constant producer) is its op type, domain, the opset of its domain, its
  attributes (a subgraph described by the same rules, recursively; a tensor by shape and dtype)
  and the shape and dtype of each output, with unknown dimensions as ``null``.
- each node's ``in``: where each input comes from, by position: ``["input", i]`` (a runtime
  input), ``["node", n, k]`` (output ``k`` of node ``n``), ``["const", shape, dtype, values]``
  (an initializer; values only for small integer constants, as in layer keys), ``["arg", i]``
  and ``["outer", ...]`` inside subgraphs (a subgraph input, a captured outer tensor), ``null``
  for an absent optional input.
- ``outputs``: where each graph output comes from, with its shape and dtype.
- ``fed``, only where inputs were given their values (``--input``: ``benanza.model.given_inputs``): each
  such input's digest, by name. An end to end run on a user's values is not one run on synthetic ones.

Not in the key, as for layer keys: node and tensor names, weight values, the file's opset
imports (a layer is normalised to its schema; other nodes carry their domain's opset).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import onnx
from onnx import AttributeProto, helper, numpy_helper

from benanza.model.dtypes import dtype_name
from benanza.model.keys import is_small_index, stable_id
from benanza.model.load import has_data
from benanza.model.walks import captured_names, topological_nodes

MODEL_KEY_VERSION = 2  # 1: the layers and their edges only (missed every node that is not a layer)

Ref = list[Any] | None
TensorType = list[Any] | None  # [dims (None where unknown), dtype], or None when not a tensor


def model_identity(
    graph: onnx.GraphProto,
    nodes: Sequence[onnx.NodeProto],
    layer_keys: Mapping[int, str],
    opsets: Mapping[str, int],
    fed: Mapping[str, str] | None = None,
) -> str:
    """16 hex digits over ``graph_fields``: the key of the model's end-to-end results.

    ``fed``: the digests of the inputs given their values (``model.given_inputs``), by name, where any is:
    an end to end on given values is not one on synthetic ones (a model fed none keeps its key).
    """
    fields = graph_fields(graph, nodes, layer_keys, opsets)
    if fed:
        fields["fed"] = dict(sorted(fed.items()))
    return stable_id(fields, version=MODEL_KEY_VERSION)


def graph_fields(
    graph: onnx.GraphProto,
    nodes: Sequence[onnx.NodeProto],
    layer_keys: Mapping[int, str],
    opsets: Mapping[str, int],
) -> dict[str, Any]:
    """The fields of a model's identity (see the module docstring).

    Args:
        graph: the prepared (bound, folded, shape-inferred) main graph.
        nodes: its nodes in the topological order the layers were extracted in.
        layer_keys: position in ``nodes`` -> layer key, for the nodes that are layers.
        opsets: the model's opset imports by domain ("" for ONNX).
    """
    inits = {i.name: i for i in graph.initializer}
    runtime_inputs = [vi for vi in graph.input if vi.name not in inits]
    scope = GraphScope(graph, None, opsets)
    for i, vi in enumerate(runtime_inputs):
        scope.refs[vi.name] = ["input", i]
    entries = scope.describe_nodes(nodes, layer_keys)
    return {
        "inputs": [_type_of(vi.type) for vi in runtime_inputs],
        "nodes": entries,
        "outputs": [[scope.ref(o.name), _type_of(o.type)] for o in graph.output],
    }


class GraphScope:
    """Canonical references to the tensors of one graph (the main graph or a subgraph).

    ``const_ref`` describes a constant; a subclass may describe more of it (control-flow layer
    keys take small constants by value, ``benanza.model.control_flow``), and its subgraphs'
    scopes are of the same class.
    """

    def __init__(self, graph: onnx.GraphProto, outer: GraphScope | None, opsets: Mapping[str, int]) -> None:
        self.graph = graph
        self.outer = outer
        self.opsets = opsets
        self.refs: dict[str, Ref] = {}
        self.consts = {i.name: i for i in graph.initializer}
        self._types: dict[str, TensorType] | None = None

    @property
    def types(self) -> dict[str, TensorType]:
        """Declared types by tensor name, read only for nodes that are not layers (protobuf reads are slow)."""
        if self._types is None:
            self._types = _value_types(self.graph)
        return self._types

    def ref(self, name: str, in_layer: bool = False) -> Ref:
        """Where tensor ``name`` comes from; a constant read by a layer is in its layer key already."""
        if not name:
            return None
        if name in self.refs:
            return self.refs[name]
        if name in self.consts:
            return ["const"] if in_layer else self.const_ref(self.consts[name])
        if self.outer is not None:
            return ["outer", self.outer.ref(name)]
        return ["undefined"]  # a dangling name (the checker would refuse it); never its name

    def describe_nodes(self, nodes: Sequence[onnx.NodeProto], layer_keys: Mapping[int, str]) -> list[dict[str, Any]]:
        entries = []
        for pos, node in enumerate(nodes):
            if pos in layer_keys:
                entry = {"layer": layer_keys[pos], "in": [self.ref(x, in_layer=True) for x in node.input]}
                if captures := _captures(node):  # a control-flow layer: where its subgraphs' outer tensors come from
                    entry["captures"] = [self.ref(x, in_layer=True) for x in captures]
                entries.append(entry)
            else:
                domain = "" if node.domain in ("", "ai.onnx") else node.domain
                entries.append(
                    {
                        "op": node.op_type,
                        "domain": domain,
                        "opset": self.opsets.get(domain),
                        "in": [self.ref(x) for x in node.input],
                        "out": [self.types.get(o) if o else None for o in node.output],
                        "attrs": [[a.name, self._attribute(a)] for a in sorted(node.attribute, key=lambda a: a.name)],
                    }
                )
            for k, out in enumerate(node.output):
                if out:
                    self.refs[out] = ["node", pos, k]
        return entries

    def const_ref(self, tensor: onnx.TensorProto) -> list[Any]:
        return _const_ref(tensor)

    def _attribute(self, attr: AttributeProto) -> Any:
        if attr.type == AttributeProto.GRAPH:
            return self.subgraph(attr.g)
        if attr.type == AttributeProto.GRAPHS:
            return [self.subgraph(g) for g in attr.graphs]
        if attr.type == AttributeProto.TENSOR:
            return self.const_ref(attr.t)
        if attr.type == AttributeProto.TENSORS:
            return [self.const_ref(t) for t in attr.tensors]
        if attr.type == AttributeProto.SPARSE_TENSOR:
            return ["sparse", list(attr.sparse_tensor.dims), dtype_name(attr.sparse_tensor.values.data_type)]
        if attr.type in (AttributeProto.TYPE_PROTO, AttributeProto.TYPE_PROTOS):
            types = [attr.tp] if attr.type == AttributeProto.TYPE_PROTO else list(attr.type_protos)
            return [_type_of(t) for t in types]
        value = helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, list):
            return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
        return value

    def subgraph(self, graph: onnx.GraphProto) -> dict[str, Any]:
        """The canonical description of ``graph``, a subgraph of this scope."""
        inner = type(self)(graph, self, self.opsets)
        for i, vi in enumerate(graph.input):
            inner.refs[vi.name] = ["arg", i]
        available = {vi.name for vi in graph.input} | set(inner.consts)
        nodes = topological_nodes(graph.node, available)
        return {
            "inputs": [_type_of(vi.type) for vi in graph.input],
            "nodes": inner.describe_nodes(nodes, {}),
            "outputs": [[inner.ref(o.name), _type_of(o.type)] for o in graph.output],
        }


def _captures(node: onnx.NodeProto) -> list[str]:
    if not any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
        return []
    return captured_names(node)


def _const_ref(tensor: onnx.TensorProto) -> list[Any]:
    """A constant by shape and dtype; by value too when it is a small integer constant (shape, axes)."""
    dtype = dtype_name(tensor.data_type)
    shape = list(tensor.dims)
    values = None
    if is_small_index(dtype, math.prod(shape)) and has_data(tensor):
        values = numpy_helper.to_array(tensor).ravel().tolist()
    return ["const", shape, dtype, values]


def _type_of(tp: onnx.TypeProto) -> TensorType:
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else None
    return [dims, dtype_name(tt.elem_type)]


def _value_types(graph: onnx.GraphProto) -> dict[str, TensorType]:
    table: dict[str, TensorType] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        table.setdefault(vi.name, _type_of(vi.type))
    return table
