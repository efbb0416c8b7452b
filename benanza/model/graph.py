"""The frozen intermediate representation of a processed model.

A ``ModelGraph`` holds the model's layers in topological order, the data edges between
them, and the nodes the processor could not turn into layers (``Unsupported``). It is a
pure value: analysis stages read it and never touch ONNX protos or files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

# a layer input's values shown in a layer table (``LayerInput.to_dict``) up to this many; beyond, a count and digest
SHOWN_VALUES = 64

# A JSON-compatible attribute value after normalisation.
AttrValue = int | float | str | tuple[int, ...] | tuple[float, ...] | tuple[str, ...]


class InputKind(StrEnum):
    """What a layer input is, for keys and for building benchmarks."""

    ACTIVATION = "activation"  # produced at run time (graph input or another layer)
    WEIGHT = "weight"  # a constant whose values do not change the computation's cost
    VALUE = "value"  # a small constant whose values are semantics (shapes, axes, pads)
    SCALE = "scale"  # a quantized op's small scale: keyed like a weight, carried by value
    ABSENT = "absent"  # an optional input left empty

    @property
    def is_constant(self) -> bool:
        """A constant of the model (weight, value or scale), not produced at run time nor absent."""
        return self in (InputKind.WEIGHT, InputKind.VALUE, InputKind.SCALE)

    @property
    def carries_value(self) -> bool:
        """Its values travel into the benchmark (a value or a scale); a weight's are synthesised."""
        return self in (InputKind.VALUE, InputKind.SCALE)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape and element type of one tensor at one layer boundary."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy name, e.g. "float32"

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True, slots=True)
class LayerInput:
    """One input of a layer: its tensor, its kind and, for VALUE inputs, the values."""

    tensor: TensorSpec
    kind: InputKind
    # flattened values for VALUE and SCALE inputs, and for an ACTIVATION the model computes as a small
    # integer tensor from its inputs (a length, positions: ``benanza.model.run_values``)
    value: tuple[Any, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.tensor.name,
            "shape": list(self.tensor.shape),
            "dtype": self.tensor.dtype,
            "kind": str(self.kind),
            **(self._value_field() if self.value is not None else {}),
        }

    def _value_field(self) -> dict[str, Any]:
        """Its values; for an activation carrying many (what a data-decided ``If`` read in the model's run) how
        many and the sha256 of their bytes (little-endian, in its dtype): a layer table is read by people."""
        values = self.value or ()
        if self.kind is not InputKind.ACTIVATION or len(values) <= SHOWN_VALUES:
            return {"value": list(values)}
        digest = hashlib.sha256(little_endian_bytes(values, self.tensor.dtype)).hexdigest()[:16]
        return {"value_elements": len(values), "value_sha256": digest}


def little_endian_bytes(values: Sequence[Any], dtype: str) -> bytes:
    """``values`` as the little-endian bytes of their ``dtype`` (numpy name): what a digest or a packed
    document of them is made of."""
    return np.asarray(values, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()


@dataclass(frozen=True, slots=True)
class Layer:
    """One benchmarkable node of a model, with everything its key is made of.

    A control-flow node (``benanza.model.control_flow``) is one layer with its subgraphs:
    the outer tensors they read follow the node's own inputs in ``inputs`` (the last
    ``captured`` of them), and ``subgraphs`` carries each subgraph attribute's canonical
    graph (one encoded graph, or a tuple for a ``GRAPHS`` attribute) for the benchmark.
    """

    index: int  # position in the model's topological order of layers
    name: str
    op_type: str
    domain: str  # "" for the default ONNX domain
    opset: int  # the model's opset for this layer's domain
    inputs: tuple[LayerInput, ...]
    outputs: tuple[TensorSpec, ...]
    attributes: tuple[tuple[str, AttrValue], ...]  # normalised, sorted by name
    flops: int | None  # arithmetic operations, a multiply-add counted as 2
    bytes_moved: int  # bytes of every input and output tensor, read or written once
    layer_key: str
    captured: int = 0  # trailing inputs that are outer tensors read by subgraphs, not node inputs
    # an output whose length (NonZero's count, the boxes an NMS keeps) or branch (an If's) the model's data
    # decides, taken from the model's run (``extract``): a sequence may only start with it, so that its network
    # is fed what makes that length (``bench.build.data_length_feeds``) or what the If read in the run, not what
    # the sequence would compute from synthetic data
    data_decided: bool = False
    subgraphs: tuple[tuple[str, str | tuple[str, ...]], ...] = ()  # attribute -> encoded subgraph(s)
    subgraph_opsets: tuple[tuple[str, int], ...] = ()  # other domains the subgraphs' nodes use -> opset
    # each output's position among the node's where one is skipped before another; () = 0, 1, 2...
    output_slots: tuple[int, ...] = ()

    @property
    def node_inputs(self) -> tuple[LayerInput, ...]:
        """The inputs of the node itself, without the tensors its subgraphs capture."""
        return self.inputs[: len(self.inputs) - self.captured]

    @property
    def attrs(self) -> dict[str, AttrValue]:
        return dict(self.attributes)

    @property
    def input_shapes(self) -> list[list[int]]:
        return [list(i.tensor.shape) for i in self.inputs if i.kind is not InputKind.ABSENT]

    @property
    def output_shapes(self) -> list[list[int]]:
        return [list(o.shape) for o in self.outputs]

    @property
    def scale_values(self) -> tuple[tuple[Any, ...], ...]:
        """The values of its SCALE inputs, in input order (kept out of its key, in its model's identity)."""
        return tuple(x.value or () for x in self.inputs if x.kind is InputKind.SCALE)

    @property
    def weight_indices(self) -> tuple[int, ...]:
        return tuple(i for i, x in enumerate(self.inputs) if x.kind is InputKind.WEIGHT)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "op_type": self.op_type,
            "domain": self.domain,
            "opset": self.opset,
            "layer_key": self.layer_key,
            "input_shapes": self.input_shapes,
            "output_shapes": self.output_shapes,
            "input_dtypes": [i.tensor.dtype for i in self.inputs if i.kind is not InputKind.ABSENT],
            "output_dtypes": [o.dtype for o in self.outputs],
            "inputs": [i.to_dict() for i in self.inputs],
            "weight_inputs": list(self.weight_indices),
            "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in self.attributes},
            "flops": self.flops,
            "bytes": self.bytes_moved,
            **({"captured_inputs": self.captured} if self.captured else {}),
        }


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A node that is not turned into a layer, and why (reported, never dropped)."""

    node: str
    op_type: str
    domain: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"node": self.node, "op_type": self.op_type, "domain": self.domain, "reason": self.reason}


# How a tensor's shape was found, weakest to strongest (``benanza.model.resolve``): ONNX shape
# inference, ONNX Runtime's symbolic shape inference, ONNX Runtime running the node, ONNX Runtime
# running the whole model on the inputs its benchmarks get (a length its data decides).
SHAPE_METHODS = ("onnx", "symbolic", "onnxruntime", "model")


@dataclass(frozen=True, slots=True)
class ShapeReport:
    """How the tensors of a prepared model were shaped, and why any was not.

    ``shaped_by``: per method (``SHAPE_METHODS`` order, those used only), how many node outputs
    it shaped. ``unresolved``: tensor -> why its shape is unknown (a runtime value decides it,
    ONNX Runtime cannot run its node, the memory guard refused to). ``by_data``: tensor -> how its
    length, which its data decides, was taken from the model's own run (``walks.LENGTH_BY_DATA``).
    ``data_work``: outputs of a layer whose work the model's data decides, shaped by that run too: an ``If``
    whose branch it decides, a ``NonMaxSuppression`` (``walks.WORK_BY_DATA``: the boxes it compares).
    ``work_values``: what such a layer reads (its inputs, and what an If's branches read of the outer graph),
    with its value in that run: the layer is benchmarked on them (``extract``), its work being its data's.
    ``setting_values``: small integer tensors an ONNX op reads as a setting (a Reshape's shape, a Range's limit)
    that the model computes from data (float tensors), with their values in that run: every layer that reads one
    carries it by value into its key and its benchmark, as those computed from integers alone
    (``run_values``); fed synthetic integers, a VITS's Reshape to lengths its durations decide failed.
    """

    shaped_by: tuple[tuple[str, int], ...] = ()
    unresolved: tuple[tuple[str, str], ...] = ()
    by_data: tuple[tuple[str, str], ...] = ()
    data_work: tuple[str, ...] = ()
    # of ``by_data``: what the model's data decides (a NonZero's count, an If's branch), not what given integers
    # alone decide (a benchmark carries those by value): such a layer only starts a sequence (``Layer.data_decided``)
    decided: tuple[str, ...] = ()
    work_values: tuple[tuple[str, Any], ...] = field(default=(), compare=False)  # tensor -> numpy array
    setting_values: tuple[tuple[str, Any], ...] = field(default=(), compare=False)  # tensor -> numpy array

    @property
    def method(self) -> str:
        """The methods that shaped the model, joined by ``+`` (``onnx``, ``onnx+onnxruntime``)."""
        return "+".join(m for m, _ in self.shaped_by)

    def reason(self, tensor: str) -> str | None:
        return dict(self.unresolved).get(tensor)


@dataclass(frozen=True, slots=True)
class CriticalPath:
    """The longest path through the layer DAG for a given per-layer cost."""

    length: float
    layers: tuple[int, ...]  # layer indices, source to sink


@dataclass(frozen=True)
class ModelGraph:
    """A model as layers in topological order plus the data edges between them.

    ``edges`` are (producer, consumer) layer indices; a path through an unsupported node
    is kept as a direct edge so ordering constraints survive. ``graph_key`` is the identity of
    the whole ONNX graph the layers came from, every node included (``benanza.model.identity``);
    empty for a graph not extracted from ONNX. ``shaped_by`` says which methods shaped its
    tensors, and how many each (``ShapeReport``).
    """

    model: str  # display name (file stem)
    path: str
    opset: Mapping[str, int]
    inputs: tuple[TensorSpec, ...]  # the bound graph inputs
    layers: tuple[Layer, ...]
    edges: tuple[tuple[int, int], ...]
    unsupported: tuple[Unsupported, ...] = ()
    constant_nodes: int = 0  # nodes that only compute constants (not layers)
    graph_key: str = ""  # the whole graph's identity (see the class docstring)
    shaped_by: tuple[tuple[str, int], ...] = ()  # shape method -> tensors it shaped
    _preds: tuple[tuple[int, ...], ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        preds: list[list[int]] = [[] for _ in self.layers]
        for src, dst in self.edges:
            if not 0 <= src < dst < len(self.layers):
                raise ValueError(f"edge {src}->{dst} does not follow topological order")
            preds[dst].append(src)
        object.__setattr__(self, "_preds", tuple(tuple(sorted(set(p))) for p in preds))

    @property
    def shape_method(self) -> str:
        """The methods that shaped the model's tensors, joined by ``+`` (``onnx``, ``onnx+symbolic``)."""
        return "+".join(m for m, _ in self.shaped_by)

    @property
    def layer_keys(self) -> list[str]:
        return [layer.layer_key for layer in self.layers]

    @property
    def unique_layer_keys(self) -> set[str]:
        return {layer.layer_key for layer in self.layers}

    def predecessors(self, index: int) -> tuple[int, ...]:
        return self._preds[index]

    def successors(self) -> list[list[int]]:
        succ: list[list[int]] = [[] for _ in self.layers]
        for dst, preds in enumerate(self._preds):
            for src in preds:
                succ[src].append(dst)
        return succ

    def critical_path(self, cost: Sequence[float] | Mapping[int, float] | Callable[[Layer], float]) -> CriticalPath:
        """Longest path through the DAG, each layer weighted by ``cost``.

        ``cost`` is indexed by layer index (sequence or mapping) or called per layer. The
        parallel lower bound of a model is this length: independent layers may overlap,
        dependent ones may not.
        """
        weights = [_cost_of(cost, layer) for layer in self.layers]
        best = [0.0] * len(self.layers)
        via: list[int | None] = [None] * len(self.layers)
        for i, preds in enumerate(self._preds):
            start, origin = 0.0, None
            for p in preds:
                if best[p] > start or (origin is None and best[p] >= start):
                    start, origin = best[p], p
            best[i], via[i] = start + weights[i], origin
        if not best:
            return CriticalPath(0.0, ())
        end = max(range(len(best)), key=lambda i: (best[i], -i))
        path = [end]
        while (prev := via[path[-1]]) is not None:
            path.append(prev)
        return CriticalPath(best[end], tuple(reversed(path)))

    def summary(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "path": self.path,
            "opset": dict(self.opset),
            "inputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in self.inputs],
            "layers": len(self.layers),
            "unique_layers": len(self.unique_layer_keys),
            "unsupported": len(self.unsupported),
            "constant_nodes": self.constant_nodes,
            "shape_method": self.shape_method,
            "shaped_by": dict(self.shaped_by),
        }


def _cost_of(cost: Sequence[float] | Mapping[int, float] | Callable[[Layer], float], layer: Layer) -> float:
    if callable(cost):
        return float(cost(layer))
    return float(cost[layer.index])
