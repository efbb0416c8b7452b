"""Weights a model streams from memory, and the benchmarks that are timed with them out of the caches.

A layer timed alone, call after call, finds its weights where its previous call left them: in the
host's caches when they fit there. Inside a model they do not: between two runs of the layer the
rest of the model passes its own weights and activations through the same caches. For most layers
that costs little, because each weight is used many times per call (a convolution over every
output position, a matrix product over many rows) and reading it overlaps the arithmetic. A layer
that uses each weight only a few times per call (a fully connected layer at batch 1, a decoder's
projections for one token, a matrix product of a few rows) is bound by reading its weights, and
alone it reads them from the cache at several times the speed the model reads them from memory.

Measured on a 2-core VM (32 MiB last-level cache), each call timed after a warm call of itself,
with and without the caches emptied in between, in the same interleaved rounds as the model: the
last fully connected layer of AlexNet (15.6 MiB of weights, 1 multiply-add per weight) took 308 us
warm and 606 us evicted, ResNet-50's (7.8 MiB) 114 us and 355 us, ZFNet-512's (3.9 MiB) 64 us and
230 us; AlexNet's units summed to 0.984 of its end to end warm and 1.010 with those three layers
evicted. A 3x3 convolution's weights are used once per output position: emptying the caches before
it made it slower alone than it is inside the model (ResNet-50's units summed to 1.12-1.17 of end
to end with every call evicted), so only the layers bound by their weights are evicted.

``streamed_weight_bytes`` is that rule over a network: the weights of its nodes that hold at least
``STREAMED_MIN_BYTES`` and use each weight element in at most ``STREAMED_MAX_REUSE``
multiply-adds (their FLOP count over twice their weight elements, from the op's FLOP counter:
``benanza.model.ops``), a weight reached through a ``DequantizeLinear``, ``Cast`` or ``Transpose``
counted with the node that computes with it (``WEIGHT_VIEWS``). A node whose FLOPs benanza does not
count (a ``Gather`` of an embedding table reads a few rows, not the table) is never counted.
Whether a layer streams is decided from the network alone. How much is evicted before it depends on
the model it is measured beside (a layer shared by several models is measured once, beside the
first; its record says how much): what the rest of that model reads between two runs of the layer
(``evicted_bytes``): the weights the model measured beside it reads in a run
(``weights_read_per_run``: an embedding table counted as the rows it gathers, not as the table) less
the layer's own, at most twice the last-level cache (which empties it), all of that when no model is
measured beside it, and nothing when the layer is all the model streams. The host's own caches then
keep of the layer's weights what they would keep inside the model, whatever their real share of a
cache that other tenants use too. Side by side on the 2-core VM (32 MiB L3;
``benchmarks/noisy_neighbour.py --cases quiet``, two runs each and one more at the final code,
2026-11-28): a decoder block at one token composed at 0.97-1.04x of end to end in fp32 (48 MiB of
weights; emptying the cache gave 1.11-1.23x), 0.74-0.77x in ORT's QOperator int8 (12 MiB; nothing
evicted, as a model that fits the cache was before, gave 0.58-0.59x), 0.88-0.89x in QDQ int8
(0.84-0.89x); the zoo's geometric mean error at G = 1 1.6%, 1.6% and 1.7% (1.9% and 1.9%).
onnxruntime-genai's int4 decoders at one token (``benchmarks/decoder_step.py``, 2026-11-29;
``MatMulNBits`` kernel time, median of 60 profiled runs, interleaved): at TinyLlama-1.1B's widths
(146 MiB read per token) a 2048 x 5632 projection took 75 us warm, 138 us after the rest of the
model and 141 us inside it; its 32000-token head 545, 754 and 756 us. In a 4-layer model 512 wide
(18 MiB read per token; its 81 MiB are mostly a float32 embedding table) the head took 114 us warm,
123 us after the rest (8 MiB), 96 us inside, and 193 us after every weight the model holds, the
table whole (the rule before: it counted held weights, not read ones).

How a benchmark is evicted belongs to its runtime (``Prepared.evict_weights``: ONNX Runtime on the
CPU reads that many bytes of a buffer kept for it, runs a session of one float so that the call
path is warm again, and reads the benchmark's inputs, which a model's previous layer has just
written); the harness calls it before each timed call, outside the timing, and times such calls one
at a time. A GPU runtime times each launch after an L2 flush already (``harness.measure_device``).
"""

from __future__ import annotations

import math

from benanza.bench.memory import weight_bytes
from benanza.bench.spec import BenchmarkSpec
from benanza.model import ops
from benanza.model.dtypes import tensor_bytes
from benanza.model.graph import ModelGraph, TensorSpec
from benanza.model.network import InputRef, Network, RefKind

STREAMED_MIN_BYTES = 1 << 20  # a node's weights below this are read in less time than the call around them
STREAMED_MAX_REUSE = 8  # multiply-adds per weight element at most: a product of up to 8 rows, say
# Ops that hand a weight on to the node that computes with it (a QDQ model's DequantizeLinear of an int8
# weight, a Cast or Transpose of it): the weight is counted with that node's reuse, never with the view's own
# (one operation per element), so that a quantized convolution is not taken for a streaming layer.
WEIGHT_VIEWS = frozenset({"DequantizeLinear", "Cast", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})


def _tensor(network: Network, ref: InputRef) -> TensorSpec | None:
    t = None if ref.kind is RefKind.ABSENT else network.tensor_of(ref)
    return None if t is None else TensorSpec("", tuple(t.shape), t.dtype)


def _weights_read(network: Network, position: int) -> list[InputRef]:
    """The weights node ``position`` reads: its own, and those reaching it through ``WEIGHT_VIEWS`` in the network."""
    found = []
    for ref in network.nodes[position].inputs:
        if ref.kind is RefKind.WEIGHT:
            found.append(ref)
        elif ref.kind is RefKind.NODE and network.nodes[ref.node].op_type in WEIGHT_VIEWS:  # type: ignore[index]
            found.extend(_weights_read(network, ref.node))  # type: ignore[arg-type]
    return found


def node_streamed_bytes(network: Network, position: int) -> int:
    """The bytes of weights node ``position`` of ``network`` reads with little reuse (0 if it reuses them).

    A ``WEIGHT_VIEWS`` node counts nothing itself; its weight counts with the node it feeds, and not at all
    when that node is outside the network (a QDQ model's weight DequantizeLinear measured alone).
    """
    node = network.nodes[position]
    info = ops.lookup(node.op_type, node.domain)
    if node.op_type in WEIGHT_VIEWS or info is None or info.flops is None:
        return 0
    weights = [(r.shape, r.dtype) for r in _weights_read(network, position) if r.shape is not None and r.dtype]
    size = sum(tensor_bytes(shape, dtype) for shape, dtype in weights)  # type: ignore[arg-type]
    if size < STREAMED_MIN_BYTES:
        return 0
    elements = sum(math.prod(shape) for shape, _ in weights)  # type: ignore[arg-type]
    inputs = tuple(_tensor(network, ref) for ref in node.inputs)
    outputs = tuple(TensorSpec("", tuple(o.shape), o.dtype) for o in node.outputs)
    # the counter ran on this very layer when the model was read (``extract``): it does not fail here
    flops = int(info.flops(dict(node.attributes), ops.OpContext(inputs, outputs, node.opset)))
    return size if 0 < flops <= 2 * STREAMED_MAX_REUSE * elements else 0


# Ops that read a few rows of a weight table (an embedding), by the table's input positions: per run they
# read what they write, not the table (a decoder's embedding, 262 MB at TinyLlama's widths in float32, is
# most of its weights and almost none of what one token reads).
GATHERED_TABLES: dict[tuple[str, str], frozenset[int]] = {
    ("", "Gather"): frozenset({0}),
    ("", "GatherElements"): frozenset({0}),
    ("", "GatherND"): frozenset({0}),
    ("com.microsoft", "GatherBlockQuantized"): frozenset({0, 2, 3}),
}


def weights_read_per_run(graph: ModelGraph) -> int:
    """The bytes of weights a whole model reads in one run: every constant layer input's, a gathered
    table's counted as the rows read (its layer's output bytes, at most the table's).

    What the rest of a model reads between two runs of one of its layers (``evicted_bytes``): what
    ``memory.weight_bytes`` counts for the memory guard, every byte held, less the rows a gather leaves.
    """
    unread = 0
    for layer in graph.layers:
        tables = GATHERED_TABLES.get((layer.domain, layer.op_type), frozenset())  # a layer's default domain is ""
        written = sum(tensor_bytes(t.shape, t.dtype) for t in layer.outputs)
        for position in tables:
            inp = layer.inputs[position] if position < len(layer.inputs) else None
            if inp is not None and inp.kind.is_constant:
                unread += max(0, tensor_bytes(inp.tensor.shape, inp.tensor.dtype) - written)
    return weight_bytes(graph) - unread


def streamed_weight_bytes(network: Network) -> int:
    """The bytes of weights ``network``'s nodes read with little reuse (``node_streamed_bytes``), summed."""
    return sum(node_streamed_bytes(network, i) for i in range(len(network.nodes)))


def streams_weights(spec: BenchmarkSpec) -> bool:
    """Whether a benchmark is timed with its weights out of the caches: a network (never a whole
    model, which streams its own) with a node bound by reading its weights."""
    return spec.network is not None and streamed_weight_bytes(spec.network) > 0


def evicted_bytes(streamed: int, model_weights: int | None, flush: int) -> int:
    """The other data a network that streams ``streamed`` bytes of weights (``streamed_weight_bytes``) has
    read through the caches before each timed call: what the rest of its model reads between two of its
    runs, the model's weights less its own (``model_weights``: the model measured beside it; None: none
    known), at most ``flush`` (what empties the last-level cache), ``flush`` when no model is known; 0
    when the network streams nothing or is all the model streams."""
    if not streamed:
        return 0
    if model_weights is None:
        return flush
    return max(0, min(flush, model_weights - streamed))
