"""DLBricks layer sequences: split a model into runnable networks of at most G layers.

``find_model_subgraphs`` is DLBricks' FindModelSubgraphs (Algorithm 1) with SplitModel
(Algorithm 2) written as a loop: models have thousands of layers, too many for recursion.
The layers are the ``ModelGraph``'s, in its topological order, and the sequences cover
every layer exactly once.

A range of layers forms a runnable network when every activation it reads from outside
(a graph input, or the output of a layer before the range) is read by its *first* layer;
the ONNX form of the paper's "a Concat without all of its input layers". A single layer
is always runnable. On an invalid range SplitModel emits the first layer alone (a
*fallback*) and retries the window shifted by one.

Two sequences are the same benchmark when their layer keys agree in order and they are
wired the same way inside: for every layer input, which earlier layer of the sequence and
which of its outputs feeds it, or which external input slot (slots numbered by first use),
or a constant. Names never enter the key, so identical sequences of different models
share it. Which tensors the written network exposes as outputs is not part of the key.

``sequence_model`` writes a sequence as a standalone ONNX model from the prepared proto:
the layers' nodes plus the constant nodes and initializers they read (real values: shape
tensors matter), the external activations as graph inputs.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from benanza.errors import SplitError, UsageError, one_line
from benanza.model.graph import InputKind, ModelGraph
from benanza.model.keys import equal_scales_field, stable_id
from benanza.model.load import with_synthetic_weights
from benanza.model.process import ProcessedModel
from benanza.model.walks import node_reads, topological_nodes

SEQUENCE_KEY_VERSION = 1  # bump when the key's fields or their canonical form change
EXTERNAL_DATA_THRESHOLD_BYTES = 1_500_000_000  # above this a sequence model keeps its weights in a side file


@dataclass(frozen=True, slots=True)
class LayerSequence:
    """A run of consecutive layers (in topological order) benchmarked as one network."""

    model: str
    index: int  # position among the model's sequences
    layers: tuple[int, ...]  # layer indices, contiguous in the model's topological order
    sequence_key: str  # stable id of the layer keys in order, the internal wiring and which scales are equal
    fallback: bool  # emitted alone by SplitModel because its window was not runnable

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "index": self.index,
            "layers": list(self.layers),
            "sequence_key": self.sequence_key,
            "fallback": self.fallback,
        }


@dataclass(frozen=True, slots=True)
class WrittenSequence:
    """Where one sequence's ONNX model was written, and what it holds."""

    path: Path
    model: str
    index: int
    layers: int  # number of layers in the sequence
    sequence_key: str
    layer_keys: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "model": self.model,
            "index": self.index,
            "layers": self.layers,
            "sequence_key": self.sequence_key,
            "layer_keys": list(self.layer_keys),
        }


# --------------------------------------------------------------------------- splitting (pure)


def _layer_producers(graph: ModelGraph) -> dict[str, tuple[int, int]]:
    """tensor name -> (layer index, output position) for every layer output."""
    return {out.name: (layer.index, pos) for layer in graph.layers for pos, out in enumerate(layer.outputs)}


def _runnable(graph: ModelGraph, producers: Mapping[str, tuple[int, int]], begin: int, end: int) -> bool:
    if any(layer.data_decided for layer in graph.layers[begin + 1 : end]):
        return False  # it would be fed what the window computes from synthetic data, not its run's values
    first = graph.layers[begin]
    first_reads = {i.tensor.name for i in first.inputs if i.kind is InputKind.ACTIVATION}
    for layer in graph.layers[begin + 1 : end]:
        for inp in layer.inputs:
            if inp.kind is not InputKind.ACTIVATION:
                continue
            src = producers.get(inp.tensor.name)
            if (src is None or src[0] < begin) and inp.tensor.name not in first_reads:
                return False
    return True


def is_runnable_range(graph: ModelGraph, begin: int, end: int) -> bool:
    """Whether layers ``[begin, end)`` form a runnable network on their own.

    Every activation the range reads from outside must be read by its first layer, so
    feeding the first layer's inputs is enough to run the whole range.
    """
    if not 0 <= begin < end <= len(graph.layers):
        raise UsageError(f"layer range [{begin}, {end}) is empty or outside 0..{len(graph.layers)}")
    return _runnable(graph, _layer_producers(graph), begin, end)


def _sequence_key(graph: ModelGraph, producers: Mapping[str, tuple[int, int]], begin: int, end: int) -> str:
    slots: dict[str, int] = {}
    wiring: list[list[list[Any]]] = []
    for layer in graph.layers[begin:end]:
        wires: list[list[Any]] = []
        for inp in layer.inputs:
            if inp.kind is InputKind.ABSENT:
                wires.append(["absent"])
            elif inp.kind is not InputKind.ACTIVATION:
                wires.append(["constant"])
            else:
                src = producers.get(inp.tensor.name)
                if src is not None and begin <= src[0] < layer.index:
                    wires.append(["layer", src[0] - begin, src[1]])
                else:
                    wires.append(["input", slots.setdefault(inp.tensor.name, len(slots))])
        wiring.append(wires)
    fields = {
        "kind": "layer_sequence",
        "layers": [layer.layer_key for layer in graph.layers[begin:end]],
        "wiring": wiring,
        **equal_scales_field([v for layer in graph.layers[begin:end] for v in layer.scale_values]),
    }
    return stable_id(fields, SEQUENCE_KEY_VERSION)


def find_model_subgraphs(graph: ModelGraph, granularity: int) -> list[LayerSequence]:
    """DLBricks FindModelSubgraphs: non-overlapping runnable sequences of at most G layers.

    Windows of ``granularity`` layers are taken in topological order. An unrunnable window
    ``[b, e)`` yields layer ``b`` alone (``fallback=True``) and is retried as
    ``[b + 1, min(e + 1, n))``, as SplitModel shifts begin and end by one.
    """
    if granularity < 1:
        raise UsageError(f"granularity must be at least 1, got {granularity}")
    producers = _layer_producers(graph)
    n = len(graph.layers)
    ranges: list[tuple[int, int, bool]] = []
    begin = 0
    while begin < n:
        end = min(begin + granularity, n)
        while not _runnable(graph, producers, begin, end):  # SplitModel's catch branch, unrolled
            ranges.append((begin, begin + 1, True))
            begin, end = begin + 1, min(end + 1, n)
        ranges.append((begin, end, False))
        begin = end
    return [
        LayerSequence(graph.model, i, tuple(range(b, e)), _sequence_key(graph, producers, b, e), fallback)
        for i, (b, e, fallback) in enumerate(ranges)
    ]


# --------------------------------------------------------------------------- writing ONNX


@dataclass(frozen=True)
class _ProtoIndex:
    """The prepared proto's nodes, looked up by layer index and by the tensors they touch."""

    nodes: tuple[onnx.NodeProto, ...]  # topological order, as the extractor walked them
    layer_nodes: tuple[int, ...]  # layer index -> position in ``nodes``
    producer: Mapping[str, int]  # tensor -> position of the node that writes it
    consumers: Mapping[str, frozenset[int]]  # tensor -> positions of the nodes that read it
    initializers: Mapping[str, onnx.TensorProto]
    types: Mapping[str, onnx.TypeProto]
    model_outputs: frozenset[str]
    layer_producers: Mapping[str, tuple[int, int]]


def _index_proto(processed: ProcessedModel) -> _ProtoIndex:
    proto, graph = processed.proto, processed.graph
    initializers = {t.name: t for t in proto.graph.initializer}
    available = set(initializers) | {vi.name for vi in proto.graph.input}
    # the very walk extract() makes, so positions and default names agree with the layers
    nodes = tuple(topological_nodes(proto.graph.node, available))
    # layers are a subsequence of these nodes: match them in order, by name and inputs
    layer_nodes: list[int] = []
    for pos, node in enumerate(nodes):
        if len(layer_nodes) == len(graph.layers):
            break
        layer = graph.layers[len(layer_nodes)]
        node_name = node.name or f"{node.op_type}_{pos}"  # extract()'s layer name
        if node_name == layer.name and [i.tensor.name for i in layer.node_inputs] == list(node.input):
            layer_nodes.append(pos)
    if len(layer_nodes) != len(graph.layers):
        missing = graph.layers[len(layer_nodes)]
        raise SplitError(f"{graph.model}: layer {missing.index} ({missing.name}) has no node in the prepared model")
    producer: dict[str, int] = {}
    consumers: dict[str, set[int]] = {}
    for pos, node in enumerate(nodes):
        producer.update((o, pos) for o in node.output if o)
        for x in node_reads(node):  # a control-flow node reads what its subgraphs capture too
            consumers.setdefault(x, set()).add(pos)
    types = {vi.name: vi.type for vi in (*proto.graph.input, *proto.graph.value_info, *proto.graph.output)}
    return _ProtoIndex(
        nodes=nodes,
        layer_nodes=tuple(layer_nodes),
        producer=producer,
        consumers={k: frozenset(v) for k, v in consumers.items()},
        initializers=initializers,
        types=types,
        model_outputs=frozenset(o.name for o in proto.graph.output),
        layer_producers=_layer_producers(graph),
    )


# id(processed) -> index, dropped when the ProcessedModel is collected (it is not hashable)
_INDEX_CACHE: dict[int, _ProtoIndex] = {}


def _cached_index(processed: ProcessedModel) -> _ProtoIndex:
    """The proto index of ``processed``, built once per ProcessedModel (its proto is not mutated)."""
    key = id(processed)
    index = _INDEX_CACHE.get(key)
    if index is None:
        index = _INDEX_CACHE[key] = _index_proto(processed)
        weakref.finalize(processed, _INDEX_CACHE.pop, key, None)
    return index


def _value_info(name: str, index: _ProtoIndex, shape: Sequence[int], dtype: str) -> onnx.ValueInfoProto:
    known = index.types.get(name)
    if known is not None and known.HasField("tensor_type"):
        vi = onnx.ValueInfoProto(name=name)
        vi.type.CopyFrom(known)
        return vi
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape))


def _build_sequence_model(processed: ProcessedModel, index: _ProtoIndex, seq: LayerSequence) -> onnx.ModelProto:
    graph = processed.graph
    if not seq.layers or list(seq.layers) != list(range(seq.layers[0], seq.layers[-1] + 1)):
        raise SplitError(f"{graph.model} sequence {seq.index}: layers {seq.layers} are not contiguous")
    if seq.layers[0] < 0 or seq.layers[-1] >= len(graph.layers):
        raise SplitError(f"{graph.model} sequence {seq.index}: layers {seq.layers} outside 0..{len(graph.layers)}")
    if not _runnable(graph, index.layer_producers, seq.layers[0], seq.layers[-1] + 1):
        raise SplitError(
            f"{graph.model} sequence {seq.index}: layers {seq.layers} read activations their first layer does not"
        )
    layers = [graph.layers[i] for i in seq.layers]
    range_nodes = {index.layer_nodes[i] for i in seq.layers}

    # constants the layers read, walked back through the nodes that compute them
    keep_nodes = set(range_nodes)
    keep_inits: set[str] = set()
    pending = [i.tensor.name for layer in layers for i in layer.inputs if i.kind.is_constant]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in index.initializers:
            keep_inits.add(name)
        elif name in index.producer:
            pos = index.producer[name]
            if pos not in keep_nodes:
                keep_nodes.add(pos)
                pending.extend(x for x in index.nodes[pos].input if x)
        else:
            raise SplitError(f"{graph.model} sequence {seq.index}: constant '{name}' has no initializer or producer")

    produced = {o.name for layer in layers for o in layer.outputs}
    inputs: list[onnx.ValueInfoProto] = []
    external: set[str] = set()
    for layer in layers:
        for inp in layer.inputs:
            name = inp.tensor.name
            if inp.kind is InputKind.ACTIVATION and name not in produced and name not in external:
                external.add(name)
                inputs.append(_value_info(name, index, inp.tensor.shape, inp.tensor.dtype))

    outputs: list[onnx.ValueInfoProto] = []
    for layer in layers:
        for out in layer.outputs:
            readers = index.consumers.get(out.name, frozenset())
            if out.name in index.model_outputs or not readers <= range_nodes or not readers & range_nodes:
                outputs.append(_value_info(out.name, index, out.shape, out.dtype))
    if not outputs:  # only a layer without outputs could leave none
        raise SplitError(f"{graph.model} sequence {seq.index}: the layers produce no tensor")

    name = f"{graph.model}_seq{seq.index}"
    sub = helper.make_graph(
        [index.nodes[pos] for pos in sorted(keep_nodes)],
        name,
        inputs,
        outputs,
        initializer=[t for n, t in index.initializers.items() if n in keep_inits],
    )
    proto = processed.proto
    model = helper.make_model(sub, opset_imports=list(proto.opset_import), producer_name="benanza")
    model.ir_version = proto.ir_version
    model.functions.extend(proto.functions)
    helper.set_model_props(
        model,
        {
            "benanza.model": graph.model,
            "benanza.layers": f"{seq.layers[0]}-{seq.layers[-1]}",
            "benanza.sequence_key": seq.sequence_key,
        },
    )
    return with_synthetic_weights(model)  # weights without data synthetic, those left in their file read in


def sequence_model(processed: ProcessedModel, seq: LayerSequence) -> onnx.ModelProto:
    """A standalone, runnable ONNX model of one sequence of ``processed``.

    Graph inputs are the activations the sequence reads from outside; graph outputs are the
    tensors it produces that are read outside it, are model outputs, or are read by nothing
    inside it (so no layer is dead code). Constants keep their real values; those of a
    structure-only model, which has none, get synthetic ones.

    Raises:
        SplitError: the layers are not a runnable range (see ``is_runnable_range``) or
            cannot be found in, or cut out of, the proto.
    """
    return _build_sequence_model(processed, _cached_index(processed), seq)


def _tensor_bytes(model: onnx.ModelProto) -> int:
    return sum(t.ByteSize() for t in model.graph.initializer) + sum(n.ByteSize() for n in model.graph.node)


def sequence_folder(out_dir: Path, model: str) -> Path:
    """The folder of one model's sequences, ``{out_dir}/{model}``, checked to lie inside ``out_dir``.

    A model's name is its file's stem, which can be ``..`` (a file named ``...onnx``) or
    ``.``, or a path tail where files share a stem (``llama_int4/model``: a folder in a folder,
    ``benanza.model.names``); a folder planted under ``out_dir`` can be a symlink to anywhere.
    Paths are resolved and compared, so nothing is ever written outside ``out_dir``.

    Raises:
        UsageError: the folder would resolve outside ``out_dir`` (one line naming both).
    """
    out_dir = Path(out_dir)
    folder = out_dir / model
    resolved, parts, root = folder.resolve(), model.split("/"), out_dir.resolve()
    inside = resolved.is_relative_to(root) and len(resolved.relative_to(root).parts) == len(parts)
    if any(p in ("", ".", "..") for p in parts) or not inside:
        raise UsageError(
            f"{folder}: resolves to {resolved}, outside --out {out_dir}; sequences are written only under --out "
            f"(model {model!r}: rename its file)"
        )
    return folder


def make_out_folder(path: Path) -> None:
    """Create ``path`` (and its parents) for writing; an OS refusal is a one-line ``UsageError``."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path}: is a file, not a folder; --out names a folder for the sequence models")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(_cannot_write(exc, path)) from None


def _cannot_write(exc: OSError, path: Path) -> str:
    return f"cannot write {exc.filename or path}: {exc.strerror or one_line(exc)}"


def write_sequences(processed: ProcessedModel, seqs: Iterable[LayerSequence], out_dir: Path) -> list[WrittenSequence]:
    """Write each sequence to ``{out_dir}/{model}/seq{index:04d}_{sequence_key}.onnx``.

    Raises:
        UsageError: the model's folder would lie outside ``out_dir`` (``sequence_folder``), or
            the OS refuses a write (a file where a folder should be, a read-only folder).
    """
    index = _cached_index(processed)
    folder = sequence_folder(out_dir, processed.graph.model)
    make_out_folder(folder)
    written: list[WrittenSequence] = []
    for seq in seqs:
        model = _build_sequence_model(processed, index, seq)
        path = folder / f"seq{seq.index:04d}_{seq.sequence_key}.onnx"
        try:
            if _tensor_bytes(model) > EXTERNAL_DATA_THRESHOLD_BYTES:
                onnx.save(model, str(path), save_as_external_data=True, location=f"{path.name}.data")
            else:
                onnx.save(model, str(path))
        except OSError as exc:
            raise UsageError(_cannot_write(exc, path)) from None
        written.append(
            WrittenSequence(
                path=path,
                model=seq.model,
                index=seq.index,
                layers=len(seq.layers),
                sequence_key=seq.sequence_key,
                layer_keys=tuple(processed.graph.layers[i].layer_key for i in seq.layers),
            )
        )
    return written


def synthetic_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Feeds for every runtime input: normal floats, zeros for integer and bool tensors.

    Integer inputs are zeros so that indices stay in range; a symbolic dimension becomes 1.
    """
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim)
        if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating) or dtype.kind == "V":
            feeds[vi.name] = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        else:
            feeds[vi.name] = np.zeros(shape, dtype=dtype)
    return feeds
