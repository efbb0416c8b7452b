"""Corpus analysis: layer repetition within and across models, and model similarity."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benanza.model.graph import ModelGraph


@dataclass(frozen=True, slots=True)
class ModelCount:
    model: str
    layers: int
    unique_layers: int
    unsupported: int


@dataclass(frozen=True, slots=True)
class OpRepeats:
    """How often one op type occurs in the corpus and how many distinct layers it has."""

    op_type: str
    layers: int
    unique_layers: int

    @property
    def repeats(self) -> int:
        return self.layers - self.unique_layers


@dataclass(frozen=True, slots=True)
class CorpusSummary:
    models: tuple[ModelCount, ...]
    layers: int
    unique_layers: int
    by_op: tuple[OpRepeats, ...]  # most layers first
    jaccard: tuple[tuple[float, ...], ...]  # models' order

    def to_dict(self) -> dict[str, Any]:
        return {
            "models": [
                {"model": m.model, "layers": m.layers, "unique_layers": m.unique_layers, "unsupported": m.unsupported}
                for m in self.models
            ],
            "corpus": {"layers": self.layers, "unique_layers": self.unique_layers},
            "by_op": [
                {"op_type": o.op_type, "layers": o.layers, "unique_layers": o.unique_layers, "repeats": o.repeats}
                for o in self.by_op
            ],
            "jaccard": [list(row) for row in self.jaccard],
        }


def jaccard(a: set[str], b: set[str]) -> float:
    """|A n B| / |A u B|; two empty sets are identical (1.0)."""
    union = a | b
    return len(a & b) / len(union) if union else 1.0


def summarize(graphs: Sequence[ModelGraph]) -> CorpusSummary:
    """Per-model and corpus-wide layer counts, repeats by op type, pairwise Jaccard."""
    key_sets = [g.unique_layer_keys for g in graphs]
    op_layers: dict[str, int] = defaultdict(int)
    op_keys: dict[str, set[str]] = defaultdict(set)
    for g in graphs:
        for layer in g.layers:
            op = f"{layer.domain}::{layer.op_type}" if layer.domain else layer.op_type
            op_layers[op] += 1
            op_keys[op].add(layer.layer_key)
    by_op = sorted(
        (OpRepeats(op, n, len(op_keys[op])) for op, n in op_layers.items()),
        key=lambda o: (-o.layers, o.op_type),
    )
    n = len(graphs)
    matrix = [[1.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            matrix[i][j] = matrix[j][i] = jaccard(key_sets[i], key_sets[j])
    return CorpusSummary(
        models=tuple(
            ModelCount(g.model, len(g.layers), len(s), len(g.unsupported))
            for g, s in zip(graphs, key_sets, strict=True)
        ),
        layers=sum(len(g.layers) for g in graphs),
        unique_layers=len(set().union(*key_sets)) if key_sets else 0,
        by_op=tuple(by_op),
        jaccard=tuple(tuple(row) for row in matrix),
    )
