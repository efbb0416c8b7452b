"""The memory guard: how much memory a benchmark will hold, decided before it allocates any.

A benchmark's memory is estimated from its shapes and dtypes alone (the spec), so nothing is
allocated to find out:

- *weights*: the constant inputs of its layers (weights and small values);
- *inputs*: the activations fed to it, allocated once as synthetic data;
- *activations*: the peak of the intermediate and output tensors alive at once when its
  layers run in order (a tensor lives from the layer that writes it to the last layer that
  reads it; outputs live to the end). Fused kernels need less, never more.

Each part is multiplied by the copies ONNX Runtime on the CPU holds of it (measured with
peak RSS on this project's harness, one benchmark per fresh process):

- ``ACTIVATION_COPIES = 4``: two sessions hold a benchmark's activations at once, the timed
  one and the profiling one that gives kernel times, and each session's BFC arena grows in
  power-of-two regions, so it can reserve up to twice what it uses. A 3x3 Conv of
  64x8x128x128 to 64 channels (32 MiB in, 256 MiB out) peaked at 1088 MiB: 32 + 4.1 x 256.
- ``WEIGHT_COPIES = 4``: the serialized model kept for the profiling session, each session's
  initializers, and the pre-packed copies ORT makes of Conv, MatMul and Gemm weights. A
  4096x4096 MatMul (64 MiB of weights) peaked at 294 MiB. Since weights of 1 MiB and more are
  held apart (``model.held_weights``: one array both sessions are given, no serialized copy)
  it holds less: its prepared benchmark with kernel times held 134 MiB, against 198 MiB
  before. The factor is kept for the smaller weights, which still travel in the protobuf.
- ``MODEL_WEIGHT_COPIES = 8``: a whole model is loaded from its file and processed again
  (constant folding, shape inference, binding) before its sessions are made, each step
  holding another copy for a moment. Two 4096x4096 MatMuls (128 MiB) peaked at 955 MiB.
- *widened weights*: ONNX Runtime's CPU kernels compute in float32 what a model holds in
  float16 or bfloat16: each such weight is cast to a float32 tensor twice its size, held in the
  session's arena as an activation is (``ACTIVATION_COPIES``). Five 8192x8192 float16 MatMuls
  (640 MiB) peaked at 7.0 GB end to end with profiling, eleven times their bytes.
- ``FILE_WEIGHT_COPIES = 3``: a model's large weights left in its external data file
  (``model.load.on_file``) are never read by processing; ONNX Runtime maps them from the file
  and each session, the timed and the profiling one, pre-packs its own copy. Five 12288x12288
  MatMuls (2.8 GiB in their file) peaked at 2.2 times that, profiled end to end.

The estimate is compared with the system's memory (``benanza.host_memory.refusal``): a
benchmark that needs more than the physical memory can never run here and is stored as
skipped with the reason; one that needs more than is free right now (``psutil``'s available
memory less a reserve for the rest of the machine) is not run and not stored, so a later run
retries it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass

from benanza.bench.spec import BenchmarkSpec, SpecKind
from benanza.model.dtypes import tensor_bytes
from benanza.model.graph import InputKind, ModelGraph
from benanza.model.network import Network, RefKind

ACTIVATION_COPIES = 4
WEIGHT_COPIES = 4
MODEL_WEIGHT_COPIES = 8
FILE_WEIGHT_COPIES = 3
WIDENED = 2  # a float32 copy of a 16-bit float weight is twice its size
HALF_FLOATS = frozenset({"float16", "bfloat16"})


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """The bytes one prepared benchmark holds, by part; ``total`` counts the copies ORT makes."""

    weights: int
    inputs: int
    activations: int
    weight_copies: int = WEIGHT_COPIES
    file_weights: int = 0  # of ``weights``: those a model left in its data file, at ``FILE_WEIGHT_COPIES``
    widened: int = 0  # of ``weights``: the float16 and bfloat16 ones, cast to float32 as the kernels read them

    @property
    def total(self) -> int:
        held = (self.weights - self.file_weights) * self.weight_copies + self.file_weights * FILE_WEIGHT_COPIES
        return held + self.inputs + (self.activations + WIDENED * self.widened) * ACTIVATION_COPIES

    def to_dict(self) -> dict[str, int]:
        return {
            "weight_bytes": self.weights,
            "file_weight_bytes": self.file_weights,
            "widened_weight_bytes": self.widened,
            "input_bytes": self.inputs,
            "activation_bytes": self.activations,
        }


def peak_live_bytes(steps: Sequence[tuple[Sequence[tuple[Hashable, int]], Sequence[Hashable]]], kept: set) -> int:
    """Peak bytes of tensors alive at once when ``steps`` run in order.

    Args:
        steps: per layer, the tensors it writes (id, bytes) and the ids it reads.
        kept: tensors that live to the end (outputs); a written tensor nobody reads and not
            kept is freed as soon as it is written.
    """
    last_read: dict[Hashable, int] = {}
    for i, (_, reads) in enumerate(steps):
        for t in reads:
            last_read[t] = i
    sizes: dict[Hashable, int] = {}
    live = peak = 0
    for i, (writes, reads) in enumerate(steps):
        for t, size in writes:
            sizes[t] = size
            live += size
        peak = max(peak, live)
        for t in {*reads, *(t for t, _ in writes)}:
            if t in sizes and t not in kept and last_read.get(t, i) <= i:
                live -= sizes.pop(t)
    return peak


def network_memory(network: Network) -> MemoryEstimate:
    """The memory of a network spec (a layer, an execution group, a sequence)."""
    weights = widened = 0
    steps = []
    for pos, node in enumerate(network.nodes):
        reads = []
        for ref in node.inputs:
            if ref.kind is RefKind.NODE:
                reads.append((ref.node, ref.output))
            elif ref.is_constant:
                nbytes = tensor_bytes(ref.shape, ref.dtype)
                weights += nbytes
                widened += nbytes if ref.dtype in HALF_FLOATS else 0
        writes = [((pos, j), tensor_bytes(o.shape, o.dtype)) for j, o in enumerate(node.outputs)]
        steps.append((writes, reads))
    kept = {(o.node, o.output) for o in network.outputs}
    inputs = sum(tensor_bytes(t.shape, t.dtype) for t in network.inputs)
    return MemoryEstimate(weights, inputs, peak_live_bytes(steps, kept), widened=widened)


def weight_bytes(graph: ModelGraph) -> int:
    """Bytes of the model's constant layer inputs (weights and values), for memory estimates."""
    return sum(_constant_bytes(graph, None))


def _constant_bytes(graph: ModelGraph, dtypes: frozenset[str] | None) -> Iterator[int]:
    for layer in graph.layers:
        for inp in layer.inputs:
            if inp.kind.is_constant and (dtypes is None or inp.tensor.dtype in dtypes):
                yield tensor_bytes(inp.tensor.shape, inp.tensor.dtype)


def graph_memory(graph: ModelGraph, file_weights: int = 0) -> MemoryEstimate:
    """The memory of a whole model run end to end, from its layer graph; ``file_weights``: the bytes of
    the weights it left in its data file (``ModelPlan.file_weight_bytes``)."""
    steps = []
    read = set()
    for layer in graph.layers:
        reads = [inp.tensor.name for inp in layer.inputs if inp.kind is InputKind.ACTIVATION]
        read.update(reads)
        steps.append(([(t.name, tensor_bytes(t.shape, t.dtype)) for t in layer.outputs], reads))
    outputs = {t.name for layer in graph.layers for t in layer.outputs} - read  # the model's outputs
    inputs = sum(tensor_bytes(t.shape, t.dtype) for t in graph.inputs)
    weights = weight_bytes(graph)
    activations = peak_live_bytes(steps, outputs)
    # at most the weights its layers read: an initializer in the file that no layer reads is never run
    files = min(file_weights, weights)
    widened = sum(_constant_bytes(graph, HALF_FLOATS))
    return MemoryEstimate(weights, inputs, activations, MODEL_WEIGHT_COPIES, files, widened)


def spec_memory(spec: BenchmarkSpec) -> MemoryEstimate:
    """The memory of any spec: a network's from its shapes; a model's from what its plan recorded.

    A model spec carries its parts (``weight_bytes``, ``input_bytes``, ``activation_bytes``,
    from ``graph_memory`` when it was planned); a part it lacks counts 0.
    """
    if spec.kind is SpecKind.MODEL:
        info = spec.model or {}
        return MemoryEstimate(
            int(info.get("weight_bytes") or 0),
            int(info.get("input_bytes") or 0),
            int(info.get("activation_bytes") or 0),
            MODEL_WEIGHT_COPIES,
            int(info.get("file_weight_bytes") or 0),
            int(info.get("widened_weight_bytes") or 0),
        )
    if spec.network is None:
        return MemoryEstimate(0, 0, 0)
    return network_memory(spec.network)
