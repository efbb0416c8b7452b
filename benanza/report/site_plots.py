"""The report site's figures as SVG (matplotlib, headless, no network).

Every figure takes analysis values and a colour per system (``system_colors``, the same on
every page). Each figure's confidence interval (``LowerBound.intervals``, a unit's
``UnitShare.kernel_interval``) is drawn as an error bar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from benanza.analysis.breakdown import UnitShare
from benanza.analysis.optimize import Optimizations
from benanza.bench.stats import CONFIDENCE, Interval
from benanza.report.plots import fit

SPEEDUPS = ("fusion", "parallel", "framework_gap", "algorithm_selection", "tensor_cores", "combined", "static_shapes")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "svg.fonttype": "none",  # text stays text: small files, selectable labels
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "svg.hashsalt": "benanza",  # the same figure gives the same file
        }
    )
    return plt


def _save(plt, fig, path: Path) -> Path:
    fit(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    return path


def system_colors(names: Sequence[str]) -> dict[str, str]:
    """A colour per system, by its position among every system's name sorted (tab10, then tab20)."""
    plt = _pyplot()
    from matplotlib.colors import to_hex

    ordered = sorted(set(names))
    palette = plt.get_cmap("tab10" if len(ordered) <= 10 else "tab20")
    return {name: to_hex(palette(i % palette.N)) for i, name in enumerate(ordered)}


@dataclass(frozen=True, slots=True)
class BoundsRow:
    """One row of a bounds chart: a model on a system, its figures (ms) with their intervals.

    A figure without a known interval is an ``Interval.point`` (no error bar); ``disturbed``
    names the figures (``"sequential_ms"``, ``"composed"``, ``"e2e_ms"``) whose measurement
    the harness found disturbed: they are drawn hatched.
    """

    label: str
    system: str
    bound: Interval | None  # the sequential lower bound
    composed: Interval | None  # DLBricks composition at the smallest G
    e2e: Interval | None
    disturbed: tuple[str, ...] = ()


def _error(ax, figure: Interval, y: float) -> None:
    """The figure's interval as an error bar at height ``y``; none where the interval has no width."""
    if figure.high > figure.low:
        err = [[max(figure.value - figure.low, 0.0)], [max(figure.high - figure.value, 0.0)]]
        ax.errorbar([figure.value], [y], xerr=err, fmt="none", ecolor="#222222", elinewidth=0.9, capsize=2.5)


def bounds_chart(rows: Sequence[BoundsRow], colors: Mapping[str, str], path: Path, title: str) -> Path:
    """Per row: e2e bar, lower bound inside it, composed mark; each with its interval as an error bar.

    The gap between the inner (lower bound) and outer (end to end) bar is the time the
    runtime spends beyond its kernels; where the error bars of the two overlap, the gap is
    within the noise of the measurements. Log scale: models differ by orders of magnitude.
    """
    plt = _pyplot()
    n = len(rows)
    fig, ax = plt.subplots(figsize=(8.5, 0.5 * n + 1.3))
    ys = list(range(n))[::-1]
    labelled: set[str] = set()
    for y, row in zip(ys, rows, strict=True):
        color = colors.get(row.system, "#777777")
        if row.e2e is not None:
            hatch = "///" if "e2e_ms" in row.disturbed else None
            ax.barh(y, row.e2e.value, height=0.7, color=color, alpha=0.45, hatch=hatch)
            _error(ax, row.e2e, y + 0.24)  # in the outer bar, above the inner one
        if row.bound is not None:
            hatch = "///" if "sequential_ms" in row.disturbed else None
            ax.barh(y, row.bound.value, height=0.3, color=color, edgecolor="#222222", linewidth=0.5, hatch=hatch)
            _error(ax, row.bound, y)
        if row.composed is not None:
            face = "white" if "composed" in row.disturbed else "#222222"
            ax.plot(
                [row.composed.value],
                [y - 0.24],
                marker="D",
                color="#222222",
                markerfacecolor=face,
                markersize=4,
                linestyle="none",
            )
            _error(ax, row.composed, y - 0.24)
        if row.e2e is None and row.bound is None:
            ax.text(0.01, y, "no figures", transform=ax.get_yaxis_transform(), va="center", fontsize=7)
        labelled.add(row.system)
    ax.set_yticks(ys, [r.label for r in rows])
    values = [f.value for r in rows for f in (r.bound, r.e2e) if f is not None and f.value]
    if values and max(values) / min(values) > 30:  # orders of magnitude apart: log, or the small ones vanish
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms, log scale)")
    else:  # from zero, so a bar's length is its latency and the gap reads true
        ax.set_xlim(left=0)
        ax.set_xlabel("latency (ms)")
    ax.set_title(title, loc="left", fontsize=10)
    from matplotlib.patches import Patch

    legend = [Patch(facecolor=colors[s], label=s) for s in sorted(labelled) if s in colors]
    legend += [
        Patch(facecolor="#999999", alpha=0.45, label="end to end"),
        Patch(facecolor="#999999", edgecolor="#222222", label="lower bound"),
        plt.Line2D([], [], marker="D", color="#222222", linestyle="none", label="composed (DLBricks)"),
        plt.Line2D([], [], color="#222222", linewidth=0.9, label=f"error bar: {CONFIDENCE:.0%} interval"),
    ]
    if any(r.disturbed for r in rows):
        legend.append(Patch(facecolor="white", edgecolor="#222222", hatch="///", label="disturbed measurement"))
    ax.legend(handles=legend, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.9)
    return _save(plt, fig, path)


def breakdown_chart(units: Sequence[UnitShare], color: str, path: Path, title: str, top: int = 15) -> Path:
    """The ``top`` units by kernel time (ms), each labelled with its share of the bound; error bar: its interval."""
    plt = _pyplot()
    shown = [u for u in units if u.kernel_ms is not None][:top][::-1]
    fig, ax = plt.subplots(figsize=(8.5, 0.32 * len(shown) + 1.2))
    ax.barh(range(len(shown)), [u.kernel_ms for u in shown], color=color)
    for y, u in enumerate(shown):
        if u.kernel_interval is not None:
            _error(ax, u.kernel_interval, y)
        end = max(u.kernel_ms or 0.0, u.kernel_interval.high if u.kernel_interval else 0.0)
        ax.text(end, y, f"  {u.share:.1%}" if u.share is not None else "", va="center", fontsize=7)
    ax.set_yticks(range(len(shown)), [f"{u.op} {_shape(u)}"[:60] for u in shown], fontsize=7)
    ax.set_xlabel(f"kernel time (ms, p10; error bar: its {CONFIDENCE:.0%} interval)")
    ax.set_title(title, loc="left", fontsize=10)
    return _save(plt, fig, path)


def _shape(unit: UnitShare) -> str:
    return "x".join(map(str, unit.input_shapes[0])) if unit.input_shapes else ""


def speedups_chart(rows: Sequence[Optimizations], colors: Mapping[str, str], path: Path, title: str) -> Path:
    """What each optimisation is worth (x) per system; analyses without a figure are left out."""
    plt = _pyplot()
    names = [n for n in SPEEDUPS if any(getattr(r, n) is not None for r in rows)]
    fig, ax = plt.subplots(figsize=(8.5, 0.5 * max(len(names), 1) * max(len(rows), 1) ** 0.5 + 1.4))
    height = 0.8 / max(len(rows), 1)
    for k, r in enumerate(rows):
        ys = [i + k * height for i in range(len(names))]
        values = [getattr(r, n) for n in names]
        ax.barh(
            [y for y, v in zip(ys, values, strict=True) if v is not None],
            [v for v in values if v is not None],
            height=height,
            color=colors.get(r.system, "#777777"),
            label=r.system,
        )
    ax.axvline(1.0, color="#222222", linewidth=0.8)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(names))], [n.replace("_", " ") for n in names])
    ax.invert_yaxis()
    ax.set_xlabel("speedup (x; 1 = no gain)")
    ax.set_title(title, loc="left", fontsize=10)
    if rows:
        ax.legend(fontsize=7, loc="lower right")
    return _save(plt, fig, path)


def slowest_layers_chart(labels: Sequence[str], ms: Sequence[float], color: str, path: Path, title: str) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 0.32 * len(labels) + 1.2))
    ax.barh(range(len(labels)), list(ms)[::-1], color=color)
    ax.set_yticks(range(len(labels)), [label[:60] for label in labels][::-1], fontsize=7)
    ax.set_xlabel("median call latency (ms)")
    ax.set_title(title, loc="left", fontsize=10)
    return _save(plt, fig, path)


def repeats_chart(ops: Sequence[tuple[str, int, int]], path: Path, top: int = 20) -> Path:
    """Per op type (op, layers, unique): every layer against the unique ones."""
    plt = _pyplot()
    shown = list(ops)[:top][::-1]
    fig, ax = plt.subplots(figsize=(8.5, 0.3 * len(shown) + 1.2))
    ys = range(len(shown))
    ax.barh(ys, [o[1] for o in shown], color="#9ecae1", label="layers")
    ax.barh(ys, [o[2] for o in shown], color="#3182bd", height=0.45, label="unique layers")
    ax.set_yticks(ys, [o[0] for o in shown], fontsize=7)
    ax.set_xlabel("layers")
    ax.set_title("Repeats by op type: every layer vs unique layers (benchmarked once)", loc="left", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    return _save(plt, fig, path)
