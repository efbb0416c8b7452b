"""Plots saved as PNG (matplotlib, headless)."""

from __future__ import annotations

import warnings
from pathlib import Path

from benanza.model.corpus import CorpusSummary


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def fit(fig) -> None:
    """Lay ``fig`` out tightly, quietly: where a label is too long for the figure (a model named by its
    binding, ``decoder_model_merged (use_cache_branch=0)``), matplotlib warns on the terminal and leaves
    the layout as it was; saved with ``bbox_inches="tight"``, the figure grows to hold the label."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()


def _save(plt, fig, path: str | Path) -> Path:
    fit(fig)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def similarity_heatmap(summary: CorpusSummary, path: str | Path) -> Path:
    """The Jaccard similarity grid of a corpus as a heatmap."""
    plt = _pyplot()
    names = [m.model.removeprefix("light_") for m in summary.models]
    n = len(names)
    fig, ax = plt.subplots(figsize=(1.0 + 0.6 * n, 0.8 + 0.55 * n))
    im = ax.imshow(summary.jaccard, vmin=0.0, vmax=1.0, cmap="viridis")
    ax.set_xticks(range(n), names, rotation=45, ha="right")
    ax.set_yticks(range(n), names)
    for i in range(n):
        for j in range(n):
            v = summary.jaccard[i][j]
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="white" if v < 0.6 else "black", fontsize=8)
    ax.set_title("Layer-set Jaccard similarity")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return _save(plt, fig, path)


def lower_bound_bars(rows, path: str | Path) -> Path:
    """Per model: sequential and parallel lower bounds, composed estimates, end to end."""
    plt = _pyplot()
    import numpy as np

    labels = [f"{r.model.removeprefix('light_')} b{r.batch_size}" for r in rows]
    grans = sorted({g for r in rows for g in r.composed_ms})
    series = [("sequential LB", [r.sequential_ms for r in rows]), ("parallel LB", [r.parallel_ms for r in rows])]
    series += [(f"composed G={g}", [r.composed_ms.get(g) for r in rows]) for g in grans]
    series.append(("end to end", [r.e2e_ms for r in rows]))
    x = np.arange(len(rows))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows) + 2), 4.5))
    for k, (name, values) in enumerate(series):
        ax.bar(x + k * width, [v if v is not None else 0 for v in values], width, label=name)
        for xi, v in zip(x, values, strict=True):
            if v is None:
                ax.text(xi + k * width, 0, "n/a", rotation=90, ha="center", va="bottom", fontsize=6)
    ax.set_xticks(x + 0.4 - width / 2, labels, rotation=30, ha="right")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    ax.set_title("Lower bound vs composed vs end-to-end latency")
    ax.legend(fontsize=7)
    return _save(plt, fig, path)


def unit_breakdown(row, path: str | Path, top: int = 15) -> Path:
    """The execution units with the largest share of the sequential lower bound."""
    plt = _pyplot()
    units = sorted((u for u in row.units if u.kernel_ms is not None), key=lambda u: -u.kernel_ms)
    total = sum(u.kernel_ms for u in units) or 1.0
    shown = units[:top]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(shown) + 1.5))
    ax.barh([u.label[:48] for u in reversed(shown)], [100 * u.kernel_ms / total for u in reversed(shown)])
    ax.set_xlabel("share of sequential lower bound (%)")
    ax.set_title(f"{row.model} batch {row.batch_size}: top {len(shown)} of {len(row.units)} units")
    return _save(plt, fig, path)
