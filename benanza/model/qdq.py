"""QDQ graphs arranged as ONNX Runtime arranges them before it fuses them.

A QDQ int8 graph (``quantize_static`` in QDQ format) marks each quantized op with
``DequantizeLinear`` nodes in front (its activations, its int8 weight, its int32 bias) and a
``QuantizeLinear`` after it; ONNX Runtime fuses each such *node unit* into one integer kernel
(``QLinearConv``, ``QLinearMatMul``, ``QLinearAdd``...). A DequantizeLinear read by several
nodes (a residual block's input, read by its first Conv and by its shortcut; a bias tensor
two Convs share) would belong to one unit only, so ONNX Runtime first gives every reader its
own copy (its ``EnsureUniqueDQForNodeUnit`` transformer) and every unit fuses. benanza does the
same to the prepared model, so each unit it benchmarks holds the DequantizeLinears its fused
kernel takes, and runs as that kernel.
"""

from __future__ import annotations

import onnx

_DEQUANTIZE_DOMAINS = frozenset({"", "ai.onnx", "com.microsoft"})


def unique_dequantize(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with one DequantizeLinear per reader of its output (the model itself when none is shared).

    Every reading edge past the first gets a copy placed right after the original (a graph
    output keeps the original and every reader gets a copy); copies are named
    ``<output>/dq<n>`` and carry the original output's value info (for a graph output, its graph output's).
    Subgraphs are left as they are.
    """
    graph = model.graph
    readers: dict[str, list[tuple[int, int]]] = {}
    for n, node in enumerate(graph.node):
        for j, name in enumerate(node.input):
            if name:
                readers.setdefault(name, []).append((n, j))
    graph_outputs = {o.name for o in graph.output}
    shared = {
        n: node.output[0]
        for n, node in enumerate(graph.node)
        if node.op_type == "DequantizeLinear"
        and node.domain in _DEQUANTIZE_DOMAINS
        and node.output
        and len(readers.get(node.output[0], ())) + (node.output[0] in graph_outputs) > 1
    }
    if not shared:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    infos = {vi.name: vi for vi in [*out.graph.value_info, *out.graph.output]}  # a graph output's is there
    taken = {x for node in graph.node for x in list(node.input) + list(node.output)}
    nodes = []
    for node in graph.node:
        nodes.append(onnx.NodeProto())
        nodes[-1].CopyFrom(node)
    copies: dict[int, list[onnx.NodeProto]] = {}
    for n, name in shared.items():
        edges = readers[name] if name in graph_outputs else readers[name][1:]
        for k, (reader, slot) in enumerate(edges, start=1):
            copy_name = f"{name}/dq{k}"
            while copy_name in taken:
                copy_name += "_"
            taken.add(copy_name)
            copy = onnx.NodeProto()
            copy.CopyFrom(graph.node[n])
            copy.output[0] = copy_name
            copy.name = f"{graph.node[n].name or name}/dq{k}"
            copies.setdefault(n, []).append(copy)
            nodes[reader].input[slot] = copy_name
            if name in infos:
                info = out.graph.value_info.add()
                info.CopyFrom(infos[name])
                info.name = copy_name
    del out.graph.node[:]
    for n, node in enumerate(nodes):
        out.graph.node.append(node)
        out.graph.node.extend(copies.get(n, ()))
    return out
