"""Tables for the model processor's results."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from benanza.model.corpus import CorpusSummary
from benanza.model.graph import ModelGraph
from benanza.report.output import table


def _shapes(shapes: list[list[int]]) -> str:
    return ", ".join("x".join(map(str, s)) or "scalar" for s in shapes)


def _methods(graph: ModelGraph) -> str:
    """``onnx`` or ``onnx 120, symbolic 16, onnxruntime 2``: the methods that shaped the model's tensors."""
    if len(graph.shaped_by) <= 1:
        return graph.shape_method or "none"
    return ", ".join(f"{method} {count}" for method, count in graph.shaped_by)


def inspect_tables(graph: ModelGraph) -> Group:
    layers = table(
        f"{graph.model}: {len(graph.layers)} layers, {len(graph.unique_layer_keys)} unique; "
        f"shapes by {_methods(graph)}",
        ["#", "name", "op", "layer key", "inputs", "outputs", ("MFLOPs", "right")],
        (
            (
                layer.index,
                layer.name,
                layer.op_type,
                layer.layer_key,
                _shapes(layer.input_shapes),
                _shapes(layer.output_shapes),
                None if layer.flops is None else layer.flops / 1e6,
            )
            for layer in graph.layers
        ),
    )
    parts: list[Table] = [layers]
    if graph.unsupported:
        parts.append(
            table(
                "unsupported nodes",
                ["node", "op", "reason"],
                ((u.node, u.op_type, u.reason) for u in graph.unsupported),
            )
        )
    return Group(*parts)


def corpus_tables(summary: CorpusSummary) -> Group:
    per_model = table(
        "models",
        ["model", ("layers", "right"), ("unique", "right"), ("unsupported", "right")],
        [(m.model, m.layers, m.unique_layers, m.unsupported) for m in summary.models]
        + [("corpus", summary.layers, summary.unique_layers, sum(m.unsupported for m in summary.models))],
    )
    by_op = table(
        "repeats by op type",
        ["op", ("layers", "right"), ("unique", "right"), ("repeats", "right")],
        ((o.op_type, o.layers, o.unique_layers, o.repeats) for o in summary.by_op),
    )
    numbers = [str(i + 1) for i in range(len(summary.models))]
    sim = table(
        "Jaccard similarity of layer sets",
        ["model", *[(n, "right") for n in numbers]],
        (
            [f"{n} {m.model}", *[f"{v:.2f}" for v in row]]
            for n, m, row in zip(numbers, summary.models, summary.jaccard, strict=True)
        ),
    )
    return Group(per_model, by_op, sim)
