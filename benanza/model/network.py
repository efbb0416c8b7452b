"""Layers of a model as a self-contained, name-free network description.

A ``Network`` is a frozen value describing one or more layers and how they are wired; its
``to_doc`` is plain JSON-able data, so it can be shipped to another process or machine, stored
with a record and turned back (``Network.from_doc``) into the same value, then into a runnable
ONNX model with synthetic weights (``benanza.bench.build``). ``VALUE`` inputs (shapes, axes,
pads, Resize scales, quantization zero points, bounds) and ``SCALE`` inputs (a quantized op's
scales: ``benanza.model.keys.constant_kind``) keep their real values, as ``value`` references;
weights are only shapes and dtypes. A network input the model computes as a small integer
tensor from its inputs (the lengths an attention kernel reads) keeps the values it has in the
model (``benanza.model.run_values``). A control-flow layer's node also
carries its canonical subgraphs (encoded strings) and how many of its inputs they capture
(``benanza.model.control_flow``).

A single layer's network key is its layer key; a multi-layer network's key hashes the
member layer keys in order together with the wiring (and which of the members' scales are
equal, where they have any: ``keys.value_classes``), so identical sequences in different
models share a key whatever their names. The key is not part of the value: ``network_of``
returns both.

The document form (``to_doc``), unchanged since networks were plain dicts::

    {"inputs": [{"shape": [...], "dtype": "float32", "value"?: [...]}, ...],
     "nodes": [{"op_type", "domain", "opset", "attributes": {name: value},
                "inputs": [ref, ...], "outputs": [{"shape", "dtype"}, ...], "layer_key",
                "captured"?, "subgraphs"?, "subgraph_opsets"?}, ...],
     "outputs": [{"node": i, "output": j}, ...],
     "layers": n}

where a ref is ``{"kind": "absent"}``, ``{"kind": "node", "node": i, "output": j}``,
``{"kind": "input", "input": i}``, ``{"kind": "weight", "shape", "dtype"}`` or
``{"kind": "value", "shape", "dtype", "value": [...]}``.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from benanza.model.graph import InputKind, ModelGraph, little_endian_bytes
from benanza.model.keys import equal_scales_field, stable_id

Shape = tuple[int, ...]
# an encoded subgraph attribute: one graph (GRAPH) or several (GRAPHS)
EncodedSubgraphs = str | tuple[str, ...]


class RefKind(StrEnum):
    """Where a node input comes from."""

    ABSENT = "absent"  # an optional input left empty
    NODE = "node"  # an output of an earlier node of the network
    INPUT = "input"  # a network input (an activation produced outside the network)
    WEIGHT = "weight"  # a constant: only its shape and dtype travel, its data is synthesised
    VALUE = "value"  # a small constant whose values are semantics: they travel


# The fields each kind of reference carries in its document, in document order.
_REF_FIELDS: dict[RefKind, tuple[str, ...]] = {
    RefKind.ABSENT: (),
    RefKind.NODE: ("node", "output"),
    RefKind.INPUT: ("input",),
    RefKind.WEIGHT: ("shape", "dtype"),
    RefKind.VALUE: ("shape", "dtype", "value"),
}


def _frozen(value: Any) -> Any:
    """A document's lists as tuples, all the way down (a value object holds nothing mutable)."""
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _listed(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True, slots=True)
class NetworkTensor:
    """Shape and dtype of a network input or a node output; a network input the model computes as a
    small integer tensor (a length, positions: ``benanza.model.run_values``) also has its values."""

    shape: Shape
    dtype: str
    value: tuple[Any, ...] | None = None  # flattened

    def to_doc(self) -> dict[str, Any]:
        doc = {"shape": list(self.shape), "dtype": self.dtype}
        if self.value is None:
            return doc
        if len(self.value) > PACKED_MIN_ELEMENTS:  # a data-decided If's inputs: their bytes, not JSON numbers
            return {**doc, "packed": pack_values(self.value, self.dtype)}
        return {**doc, "value": list(self.value)}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> NetworkTensor:
        value = doc.get("value")  # only a computed network input has one
        if "packed" in doc:
            value = unpack_values(doc["packed"], doc["dtype"])
        return cls(tuple(doc["shape"]), doc["dtype"], None if value is None else _frozen(list(value)))


# A network input's values longer than this travel packed (``pack_values``): what an If whose branch the
# data decides reads, carried from the model's run (an SSDlite's 27,000 boxes: 2 MB of JSON numbers a record)
PACKED_MIN_ELEMENTS = 1024


def pack_values(values: Sequence[Any], dtype: str) -> str:
    """``values`` as the base64 of their zlib-compressed little-endian bytes in ``dtype`` (exact: they were of
    that dtype)."""
    return base64.b64encode(zlib.compress(little_endian_bytes(values, dtype))).decode("ascii")


def unpack_values(packed: str, dtype: str) -> list[Any]:
    """The values ``pack_values`` packed, as Python numbers."""
    raw = zlib.decompress(base64.b64decode(packed))
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).tolist()


@dataclass(frozen=True, slots=True)
class InputRef:
    """One input of a network node; which fields are set depends on ``kind`` (``_REF_FIELDS``).

    ``benanza.runtimes.cuda.params.resolved_node`` also sets ``shape`` and ``dtype`` on NODE
    and INPUT references (the tensor they point at); those are not part of the document.
    """

    kind: RefKind
    node: int | None = None  # NODE: the producing node's position
    output: int | None = None  # NODE: which of its outputs
    input: int | None = None  # INPUT: the position in ``Network.inputs``
    shape: Shape | None = None  # WEIGHT, VALUE
    dtype: str | None = None  # WEIGHT, VALUE
    value: tuple[Any, ...] | None = None  # VALUE: the flattened values

    def __post_init__(self) -> None:
        missing = [f for f in _REF_FIELDS[self.kind] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a {self.kind} input reference needs {', '.join(missing)}")

    @classmethod
    def absent(cls) -> InputRef:
        return cls(RefKind.ABSENT)

    @classmethod
    def of_node(cls, node: int, output: int = 0) -> InputRef:
        return cls(RefKind.NODE, node=node, output=output)

    @classmethod
    def of_input(cls, index: int) -> InputRef:
        return cls(RefKind.INPUT, input=index)

    @classmethod
    def weight(cls, shape: Sequence[int], dtype: str) -> InputRef:
        return cls(RefKind.WEIGHT, shape=tuple(shape), dtype=dtype)

    @classmethod
    def of_value(cls, shape: Sequence[int], dtype: str, value: Sequence[Any]) -> InputRef:
        return cls(RefKind.VALUE, shape=tuple(shape), dtype=dtype, value=_frozen(list(value)))

    @property
    def is_activation(self) -> bool:
        """Produced at run time (a network input or another node), not a constant."""
        return self.kind is RefKind.NODE or self.kind is RefKind.INPUT

    @property
    def is_constant(self) -> bool:
        return self.kind is RefKind.WEIGHT or self.kind is RefKind.VALUE

    def to_doc(self) -> dict[str, Any]:
        return {"kind": str(self.kind), **{f: _listed(getattr(self, f)) for f in _REF_FIELDS[self.kind]}}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> InputRef:
        kind = RefKind(doc["kind"])
        return cls(kind, **{f: _frozen(doc[f]) for f in _REF_FIELDS[kind]})


@dataclass(frozen=True, slots=True)
class NetworkNode:
    """One layer of a network: its op, normalised attributes, wired inputs and output tensors."""

    op_type: str
    domain: str
    opset: int
    attributes: tuple[tuple[str, Any], ...]  # as the layer has them (normalised, sorted by name)
    inputs: tuple[InputRef, ...]
    outputs: tuple[NetworkTensor, ...]
    layer_key: str
    captured: int = 0  # control flow: the last ``captured`` inputs are read by the subgraphs
    subgraphs: tuple[tuple[str, EncodedSubgraphs], ...] = ()  # attribute -> encoded subgraph(s)
    subgraph_opsets: tuple[tuple[str, int], ...] = ()  # other domains the subgraphs use -> opset
    output_slots: tuple[int, ...] = ()  # ``Layer.output_slots``: where an output is skipped before another

    @property
    def attrs(self) -> dict[str, Any]:
        return dict(self.attributes)

    def to_doc(self) -> dict[str, Any]:
        return {
            "op_type": self.op_type,
            "domain": self.domain,
            "opset": self.opset,
            "attributes": {k: _listed(v) for k, v in self.attributes},
            "inputs": [r.to_doc() for r in self.inputs],
            "outputs": [o.to_doc() for o in self.outputs],
            "layer_key": self.layer_key,
            **({"captured": self.captured} if self.captured else {}),
            **({"subgraphs": {k: _listed(v) for k, v in self.subgraphs}} if self.subgraphs else {}),
            **({"subgraph_opsets": dict(self.subgraph_opsets)} if self.subgraph_opsets else {}),
            **({"output_slots": list(self.output_slots)} if self.output_slots else {}),
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> NetworkNode:
        return cls(
            op_type=doc["op_type"],
            domain=doc["domain"],
            opset=int(doc["opset"]),
            attributes=tuple((k, _frozen(v)) for k, v in doc["attributes"].items()),
            inputs=tuple(InputRef.from_doc(r) for r in doc["inputs"]),
            outputs=tuple(NetworkTensor.from_doc(o) for o in doc["outputs"]),
            layer_key=doc["layer_key"],
            captured=int(doc.get("captured", 0)),
            subgraphs=tuple((k, _frozen(v)) for k, v in doc.get("subgraphs", {}).items()),
            subgraph_opsets=tuple((d, int(v)) for d, v in doc.get("subgraph_opsets", {}).items()),
            output_slots=tuple(int(s) for s in doc.get("output_slots", ())),
        )


@dataclass(frozen=True, slots=True)
class NetworkOutput:
    """A network output: output ``output`` of node ``node``."""

    node: int
    output: int

    def to_doc(self) -> dict[str, Any]:
        return {"node": self.node, "output": self.output}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> NetworkOutput:
        return cls(int(doc["node"]), int(doc["output"]))


@dataclass(frozen=True, slots=True)
class Network:
    """Layers and their wiring, free of names; ``layers`` counts the model layers it holds."""

    inputs: tuple[NetworkTensor, ...]
    nodes: tuple[NetworkNode, ...]
    outputs: tuple[NetworkOutput, ...]
    layers: int

    def tensor_of(self, ref: InputRef) -> NetworkTensor | None:
        """The tensor a reference reads: a network input, a node output, or the constant itself."""
        if ref.kind is RefKind.INPUT:
            return self.inputs[ref.input]  # type: ignore[index]
        if ref.kind is RefKind.NODE:
            return self.nodes[ref.node].outputs[ref.output]  # type: ignore[index]
        if ref.shape is not None and ref.dtype is not None:
            return NetworkTensor(ref.shape, ref.dtype)
        return None

    def output_tensor(self, output: NetworkOutput) -> NetworkTensor:
        return self.nodes[output.node].outputs[output.output]

    def to_doc(self) -> dict[str, Any]:
        """The network as plain data: the form stored with a spec (its bytes key nothing)."""
        return {
            "inputs": [t.to_doc() for t in self.inputs],
            "nodes": [n.to_doc() for n in self.nodes],
            "outputs": [o.to_doc() for o in self.outputs],
            "layers": self.layers,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Network:
        return cls(
            inputs=tuple(NetworkTensor.from_doc(t) for t in doc["inputs"]),
            nodes=tuple(NetworkNode.from_doc(n) for n in doc["nodes"]),
            outputs=tuple(NetworkOutput.from_doc(o) for o in doc["outputs"]),
            layers=int(doc["layers"]),
        )


def network_of(graph: ModelGraph, layer_indices: Sequence[int]) -> tuple[str, Network]:
    """The key and network of the given layers (in topological order) of ``graph``.

    Inputs produced outside the layers become network inputs, numbered in order of first
    use; outputs consumed outside (or graph outputs, or the last layer's) become network
    outputs.
    """
    members = sorted(layer_indices)
    if not members:
        raise ValueError("a network needs at least one layer")
    produced: dict[str, tuple[int, int]] = {}
    for pos, idx in enumerate(members):
        for out_pos, t in enumerate(graph.layers[idx].outputs):
            produced[t.name] = (pos, out_pos)
    external: dict[str, int] = {}
    net_inputs: list[NetworkTensor] = []
    nodes: list[NetworkNode] = []
    wiring: list[list[Any]] = []
    for idx in members:
        layer = graph.layers[idx]
        refs: list[InputRef] = []
        for inp in layer.inputs:
            t = inp.tensor
            if inp.kind is InputKind.ABSENT:
                refs.append(InputRef.absent())
            elif inp.kind is InputKind.ACTIVATION and t.name in produced:
                refs.append(InputRef.of_node(*produced[t.name]))
            elif inp.kind is InputKind.ACTIVATION:
                if t.name not in external:
                    external[t.name] = len(net_inputs)
                    net_inputs.append(NetworkTensor(tuple(t.shape), t.dtype, inp.value))
                refs.append(InputRef.of_input(external[t.name]))
            elif inp.kind.carries_value:
                refs.append(InputRef.of_value(t.shape, t.dtype, inp.value or ()))
            else:
                refs.append(InputRef.weight(t.shape, t.dtype))
        wiring.append([[str(r.kind), r.node if r.kind is RefKind.NODE else r.input] for r in refs])
        nodes.append(
            NetworkNode(
                op_type=layer.op_type,
                domain=layer.domain,
                opset=layer.opset,
                attributes=tuple((k, _frozen(v)) for k, v in layer.attributes),
                inputs=tuple(refs),
                outputs=tuple(NetworkTensor(tuple(o.shape), o.dtype) for o in layer.outputs),
                layer_key=layer.layer_key,
                captured=layer.captured,
                subgraphs=tuple((k, _frozen(v)) for k, v in layer.subgraphs),
                subgraph_opsets=tuple(layer.subgraph_opsets),
                output_slots=layer.output_slots,
            )
        )
    consumed_outside = _consumed_outside(graph, set(members))
    outputs = [
        NetworkOutput(pos, out_pos)
        for pos, idx in enumerate(members)
        for out_pos, t in enumerate(graph.layers[idx].outputs)
        if t.name in consumed_outside
    ] or [NetworkOutput(len(members) - 1, o) for o in range(len(graph.layers[members[-1]].outputs))]
    network = Network(tuple(net_inputs), tuple(nodes), tuple(outputs), len(members))
    if len(members) == 1:
        key = graph.layers[members[0]].layer_key
    else:
        key = stable_id(
            {
                "layers": [n.layer_key for n in nodes],
                "wiring": wiring,
                "outputs": [[o.node, o.output] for o in outputs],
                **equal_scales_field([v for idx in members for v in graph.layers[idx].scale_values]),
            }
        )
    return key, network


def _consumed_outside(graph: ModelGraph, members: set[int]) -> set[str]:
    """Tensors read by layers outside ``members``, plus the tensors no layer reads."""
    read_outside: set[str] = set()
    read_anywhere: set[str] = set()
    for layer in graph.layers:
        for inp in layer.inputs:
            if inp.kind is InputKind.ACTIVATION:
                read_anywhere.add(inp.tensor.name)
                if layer.index not in members:
                    read_outside.add(inp.tensor.name)
    final = {t.name for idx in members for t in graph.layers[idx].outputs if t.name not in read_anywhere}
    return read_outside | final
