"""Layers of a model as a self-contained, name-free network description.

A ``Network`` is plain data (JSON-able) describing one or more layers and how they are
wired: it can be shipped to another process or machine and turned back into a runnable
ONNX model with synthetic weights (``benanza.bench.build``). ``VALUE`` inputs (shapes, axes,
pads, Resize scales, quantization scales and zero points, bounds: ``benanza.model.keys.is_value``)
keep their real values; weights are only shapes and dtypes. A control-flow layer's node also
carries its canonical subgraphs and how many of its inputs they capture
(``benanza.model.control_flow``).

A single layer's network key is its layer key; a multi-layer network's key hashes the
member layer keys in order together with the wiring, so identical sequences in different
models share a key whatever their names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benanza.model.graph import InputKind, ModelGraph
from benanza.model.keys import stable_id

Network = dict[str, Any]


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
    net_inputs: list[dict[str, Any]] = []
    nodes: list[dict[str, Any]] = []
    wiring: list[list[Any]] = []
    for idx in members:
        layer = graph.layers[idx]
        refs: list[dict[str, Any]] = []
        for inp in layer.inputs:
            t = inp.tensor
            if inp.kind is InputKind.ABSENT:
                refs.append({"kind": "absent"})
            elif inp.kind is InputKind.ACTIVATION and t.name in produced:
                node_pos, out_pos = produced[t.name]
                refs.append({"kind": "node", "node": node_pos, "output": out_pos})
            elif inp.kind is InputKind.ACTIVATION:
                if t.name not in external:
                    external[t.name] = len(net_inputs)
                    net_inputs.append({"shape": list(t.shape), "dtype": t.dtype})
                refs.append({"kind": "input", "input": external[t.name]})
            elif inp.kind is InputKind.VALUE:
                refs.append({"kind": "value", "shape": list(t.shape), "dtype": t.dtype, "value": list(inp.value or ())})
            else:
                refs.append({"kind": "weight", "shape": list(t.shape), "dtype": t.dtype})
        wiring.append([[r["kind"], r.get("node", r.get("input"))] for r in refs])
        nodes.append(
            {
                "op_type": layer.op_type,
                "domain": layer.domain,
                "opset": layer.opset,
                "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in layer.attributes},
                "inputs": refs,
                "outputs": [{"shape": list(o.shape), "dtype": o.dtype} for o in layer.outputs],
                "layer_key": layer.layer_key,
                # control flow: the last ``captured`` inputs are read by the subgraphs, not the node
                **({"captured": layer.captured} if layer.captured else {}),
                **({"subgraphs": {k: _jsonable(v) for k, v in layer.subgraphs}} if layer.subgraphs else {}),
                **({"subgraph_opsets": dict(layer.subgraph_opsets)} if layer.subgraph_opsets else {}),
            }
        )
    consumed_outside = _consumed_outside(graph, set(members))
    outputs = [
        {"node": pos, "output": out_pos}
        for pos, idx in enumerate(members)
        for out_pos, t in enumerate(graph.layers[idx].outputs)
        if t.name in consumed_outside
    ] or [{"node": len(members) - 1, "output": o} for o in range(len(graph.layers[members[-1]].outputs))]
    network: Network = {"inputs": net_inputs, "nodes": nodes, "outputs": outputs, "layers": len(members)}
    if len(members) == 1:
        key = graph.layers[members[0]].layer_key
    else:
        key = stable_id(
            {
                "layers": [n["layer_key"] for n in nodes],
                "wiring": wiring,
                "outputs": [[o["node"], o["output"]] for o in outputs],
            }
        )
    return key, network


def _jsonable(encoded: str | tuple[str, ...]) -> str | list[str]:
    return encoded if isinstance(encoded, str) else list(encoded)


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
