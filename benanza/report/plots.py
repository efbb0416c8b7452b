"""Plots saved as PNG (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

from benanza.model.corpus import CorpusSummary


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
