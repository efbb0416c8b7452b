"""The report as a static site: HTML pages, SVG figures and CSV tables in one folder.

Renders a ``survey.Survey`` and computes nothing of its own: every figure on a page is a
value of the analysis stages, formatted. The site works from ``file://`` (no server, no
network): styles are inline, figures are SVG files beside the pages, every link is
relative. Each table has a CSV beside it under ``csv/``, with the JSON's columns
(``report.output.write_csv``).

Layout of ``out``::

    index.html             the answer per model, the headline table, latest changes, systems, models
    models/NAME.html       one per model
    systems/NAME.html      one per system
    corpus.html            unique vs total layers, repeats by op type, Jaccard similarity
    figures/*.svg, csv/*.csv
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benanza import __version__
from benanza.analysis.compare import flatten
from benanza.analysis.lower_bound import LowerBound
from benanza.bench.stats import CONFIDENCE, Interval
from benanza.errors import UsageError
from benanza.report import site_plots
from benanza.report.output import DISTURBED_MARK, DISTURBED_NOTE, figure_cell, fmt, fmt_coverage, fmt_figure, write_csv
from benanza.survey import ModelFigures, Survey, SystemFigures

FIGURE_STYLE = 2  # bump when a figure's drawing changes, so an incremental report redraws it
BREAKDOWN_ROWS = 30  # units listed per system on a model page (the CSV has all)
INTERVAL_NOTE = f"± half-width of the {CONFIDENCE:.0%} confidence interval"


@dataclass(frozen=True)
class SiteFiles:
    """What ``write_site`` wrote (paths relative to ``out``)."""

    out: Path
    pages: tuple[str, ...]
    figures: tuple[str, ...]
    tables: tuple[str, ...]

    def listing(self) -> list[tuple[str, tuple[str, ...]]]:
        return [("page", self.pages), ("figure", self.figures), ("table", self.tables)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "index": str(self.out / "index.html"),
            "pages": list(self.pages),
            "figures": list(self.figures),
            "tables": list(self.tables),
        }


def slug(name: str) -> str:
    """A file name for a model or system: letters, digits, ``.-_`` kept, the rest ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).strip(".") or "_"


def _c(text: Any = None, *, href: str | None = None, num: bool = False, cls: str | None = None, color=None) -> dict:
    shown = text if isinstance(text, str) else fmt(text)
    return {"text": shown, "href": href, "cls": cls or ("num" if num else None), "color": color}


def _col(name: str, num: bool = False) -> dict[str, Any]:
    return {"name": name, "num": num}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3g} ms" if value < 1000 else f"{value:,.0f} ms"


def _figure(row: LowerBound, figure: str, value: float | None) -> dict:
    """A table cell of one of ``row``'s figures, as the CLI prints it: ``42.1 ± 0.4``, marked when disturbed.

    The mark goes on a line of its own under the figure, as in the CLI's table, so a column stays narrow.
    """
    if value is None or figure not in row.disturbed:
        return _c(figure_cell(row, figure, value), num=True)
    return _c(fmt_figure(value, row.interval(figure)), cls="num disturbed") | {"mark": DISTURBED_MARK.strip()}


def _figures_note(rows: Iterable[LowerBound]) -> str:
    """What a lower-bound table's cells mean: ms with ± the interval's half-width, and ``(disturbed)`` if any is."""
    disturbed = any(r.disturbed for r in rows)
    return f"ms, {INTERVAL_NOTE}" + (f"; {DISTURBED_NOTE}" if disturbed else "")


def _ms_of(row: LowerBound, figure: str, value: float) -> str:
    """A figure of ``row`` in a sentence: ``42.1 ± 0.4 ms``, marked when disturbed."""
    return figure_cell(row, figure, value, unit=" ms")


class _Site:
    """One rendering of a survey into ``out``; collects what it writes."""

    def __init__(self, survey: Survey, out: Path) -> None:
        from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

        self.survey = survey
        self.out = out
        self.env = Environment(
            loader=PackageLoader("benanza.report", "templates"),
            autoescape=select_autoescape(["html"]),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        names = list(survey.stack_order) or [s.name for s in survey.systems]
        self.colors = site_plots.system_colors(names)
        self.pages: list[str] = []
        self.figures: list[str] = []
        self.tables: list[str] = []
        self.plots: list[Callable[[], Any]] = []
        self.manifest = out / "figures" / "drawn.json"  # figure -> digest of the data it was drawn from
        try:
            self.previous: dict[str, str] = json.loads(self.manifest.read_text())
        except (OSError, ValueError):
            self.previous = {}
        self.drawn: dict[str, str] = {}
        self.model_pages = self._unique_pages("models", sorted({m.model for m in survey.models}))
        self.system_pages = self._unique_pages("systems", [s.name for s in survey.systems])

    @staticmethod
    def _unique_pages(folder: str, names: Iterable[str]) -> dict[str, str]:
        pages: dict[str, str] = {}
        used: set[str] = set()
        for name in names:
            base = slug(name)
            candidate, n = base, 1
            while candidate.lower() in used:
                n += 1
                candidate = f"{base}-{n}"
            used.add(candidate.lower())
            pages[name] = f"{folder}/{candidate}.html"
        return pages

    # -- links and files ------------------------------------------------------------------

    def model_link(self, name: str, root: str) -> str | None:
        page = self.model_pages.get(name)
        return f"{root}{page}" if page else None

    def system_link(self, name: str, root: str) -> str | None:
        page = self.system_pages.get(name)
        return f"{root}{page}" if page else None

    def csv(self, name: str, rows: Iterable[Mapping[str, Any] | Any], root: str) -> str:
        rel = f"csv/{name}.csv"
        path = self.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as f:
            write_csv(rows, f)
        self.tables.append(rel)
        return f"{root}{rel}"

    def figure(self, name: str, draw: Callable[[Path], Any], alt: str, root: str, data: Any = None) -> dict[str, Any]:
        """A figure drawn after the pages; skipped when the file holds a drawing of the same ``data`` already."""
        rel = f"figures/{name}.svg"
        digest = hashlib.sha256(repr((data, self.colors, FIGURE_STYLE)).encode()).hexdigest()[:16]
        self.drawn[rel] = digest
        if data is None or self.previous.get(rel) != digest or not (self.out / rel).is_file():
            self.plots.append(lambda: draw(self.out / rel))
        self.figures.append(rel)
        return {"src": f"{root}{rel}", "alt": alt, "width": 860}

    def page(self, rel: str, template: str, **context: Any) -> None:
        root = "../" * rel.count("/")
        nav = [
            {"name": s.name, "href": self.system_pages[s.name], "color": self.colors.get(s.name, "#777777")}
            for s in self.survey.systems
        ]
        html = self.env.get_template(template).render(
            survey=self.survey,
            version=__version__,
            root=root,
            nav_systems=nav,
            confidence=f"{CONFIDENCE:.0%}",
            **context,
        )
        path = self.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
        self.pages.append(rel)

    # -- shared pieces --------------------------------------------------------------------

    def system_cell(self, name: str, root: str, stack: str | None = None) -> dict[str, Any]:
        text = f"{name} @{stack}" if stack else name
        return _c(text, href=self.system_link(name, root), color=self.colors.get(name))

    def answer(self, m: ModelFigures, root: str, with_model: bool) -> str | None:
        """One sentence per model and batch size: how fast it could run, how fast it runs, and the largest unit."""
        from html import escape

        comparison = next(
            (c for c in self.survey.comparisons if c.model == m.model and c.batch_size == m.batch_size), None
        )
        best = comparison.fastest if comparison else None
        name = escape(m.model)
        subject = f'<a href="{self.model_link(m.model, root)}">{name}</a>' if with_model else name
        if best is None:
            measured = [f for f in m.latest if f.row.variant is not None]
            if not measured:
                return None
            f = max(measured, key=lambda f: f.row.coverage)
            why = "; ".join(sorted({x["reason"] for x in f.row.missing}))[:300]
            return (
                f"{subject} at batch {m.batch_size}: no lower bound yet, {fmt_coverage(f.row.coverage)} of its "
                f"nodes are measured on {escape(f.row.system)} ({escape(why) or 'nothing missing is named'})."
            )
        where = (best.system, best.stack_id, best.variant)
        fig = next(f for f in m.latest if (f.row.system, f.row.stack_id, f.row.variant) == where)
        row = fig.row
        entries = comparison.systems if comparison else ()
        systems = {e.system for e in entries}
        # one system measured in several variants (ONNX Runtime's levels, say): which of them is meant
        variant = f" ({escape(row.variant or '')})" if len(systems) < len(entries) else ""
        parts = [f"{subject} at batch {m.batch_size} on {escape(row.system)}{variant}"]
        if row.sequential_ms is not None:
            could = f"could run in <b>{_ms_of(row, 'sequential_ms', row.sequential_ms)}</b> (sum of its kernels"
            if row.parallel_ms is not None and row.parallel_ms < row.sequential_ms * 0.995:
                could += f"; {_ms_of(row, 'parallel_ms', row.parallel_ms)} with independent layers in parallel"
            parts.append(could + ")")
        else:
            parts.append(f"has no lower bound ({fmt_coverage(row.coverage)} of its nodes measured)")
        if row.e2e_ms is not None:
            ratio = f": {row.e2e_ms / row.sequential_ms:.2f}x its lower bound" if row.sequential_ms else ""
            parts.append(f"and runs in <b>{_ms_of(row, 'e2e_ms', row.e2e_ms)}</b> end to end{ratio}")
        if row.defaults_e2e_ms is not None:  # measured where the layers' settings are not the runtime's defaults
            below = ", below its lower bound: what the defaults gain spans layers" if row.defaults_notes else ""
            parts.append(f"({_ms_of(row, 'defaults_e2e_ms', row.defaults_e2e_ms)} at its runtime's defaults{below})")
        if row.exported_e2e_ms is not None:  # measured where its file leaves input dimensions free
            parts.append(f"({_ms_of(row, 'exported_e2e_ms', row.exported_e2e_ms)} as exported, dimensions free)")
        sentence = " ".join(parts[:1]) + " " + " ".join(parts[1:]) + "."
        top = next((u for u in fig.breakdown if u.share is not None), None)
        if top is not None:
            sentence += (
                f" Its largest unit, {escape(top.op)} ({escape(top.label.split(' (')[0])}), "
                f"takes {top.share:.0%} of the bound."
            )
        sentence += self._why(fig)
        if len(entries) > 1:
            measured = f"{len(systems)} systems" if len(systems) == len(entries) else f"{len(entries)} system variants"
            sentence += f" Fastest of {measured}."
        return sentence

    @staticmethod
    def _why(fig: SystemFigures) -> str:
        """Why it does not run at its bound: the runtime's overhead and what each optimisation is worth.

        Where the whole model's own kernel time was profiled (``e2e_kernel_ms``), the gap to the bound is
        split: what the runtime spends beyond the model's kernels, and how much longer those kernels take
        inside the model than its units alone (each of which, called again and again, keeps its data in
        the caches)."""
        o = fig.optimizations
        row = fig.row
        parts = []
        if row.e2e_ms is not None and row.sequential_ms:
            inside = row.e2e_kernel_ms
            over = row.e2e_ms - (row.sequential_ms if inside is None else inside)
            parts.append(
                f"the runtime spends {_ms(over)} beyond its kernels"
                if over > 0
                else "the runtime adds nothing measurable beyond its kernels"
            )
            ratio = row.kernels_inside_ratio
            if inside is not None and ratio is not None and ratio > 1:
                parts.append(
                    f"its kernels take {ratio:.2f}x as long inside the model as its units "
                    f"alone ({_ms(inside - row.sequential_ms)} more; alone, each unit keeps its data in the caches)"
                )
        gains = [
            (name.replace("_", " "), value)
            for name in ("parallel", "algorithm_selection", "tensor_cores")
            if (value := getattr(o, name)) is not None and value > 1.005
        ]
        parts += [f"{name} would gain {value:.2f}x" for name, value in gains]
        if o.fusion is not None and o.fusion >= 1.005:
            parts.append(f"the runtime's fusion already gains {o.fusion:.2f}x")
        elif o.fusion is not None and o.fusion <= 0.995:  # fused units slower than their layers run alone
            parts.append(
                f"the runtime's fused units take {1 / o.fusion:.2f}x the kernel time of their layers run alone"
            )
        return f" Why not faster: {'; '.join(parts)}." if parts else ""

    # -- pages ----------------------------------------------------------------------------

    def index(self) -> None:
        s, root = self.survey, ""
        answers = [a for m in s.models if (a := self.answer(m, root, with_model=True))]
        latest = [(m, f) for m in s.models for f in m.latest]
        entries = [_bound_entry(f"{m.model} b{m.batch_size}", f) for m, f in latest if f.row.variant is not None]
        headline_figure = (
            self.figure(
                "headline",
                lambda p: site_plots.bounds_chart(entries, self.colors, p, "Lower bound vs end to end, latest stacks"),
                "lower bound and end-to-end latency per model and system",
                root,
                data=entries,
            )
            if entries
            else None
        )
        grans = sorted({g for _, f in latest for g in f.row.composed_ms})
        headline = {
            "caption": f"{_figures_note(f.row for _, f in latest)}; gap: end to end / lower bound",
            "csv": self.csv("headline", [f.to_dict() | {"units": None} for _, f in latest], root),
            "columns": [
                _col("model"),
                _col("batch", True),
                _col("system"),
                _col("lower bound", True),
                _col("parallel", True),
                *[_col(f"composed G={g}", True) for g in grans],
                _col("end to end", True),
                _col("gap", True),
                _col("coverage", True),
            ],
            "rows": [
                [
                    _c(m.model, href=self.model_link(m.model, root)),
                    _c(m.batch_size, num=True),
                    self.system_cell(f.row.system, root),
                    _figure(f.row, "sequential_ms", f.row.sequential_ms),
                    _figure(f.row, "parallel_ms", f.row.parallel_ms),
                    *[_figure(f.row, f"composed_ms[{g}]", f.row.composed_ms.get(g)) for g in grans],
                    _figure(f.row, "e2e_ms", f.row.e2e_ms),
                    _c(_ratio(f.row.e2e_ms, f.row.sequential_ms), num=True),
                    _c(fmt_coverage(f.row.coverage), num=True),
                ]
                for m, f in latest
            ],
        }
        changes = {
            "caption": "Each system's latest stack against the stack before it: after / before. A ratio is how a "
            "figure moved, not a verdict: no significance test is applied, so a change within the samples' "
            "spread is not a regression.",
            "csv": self.csv("changes", s.changes, root),
            "empty": "No system has figures on two stacks yet: nothing to compare.",
            "columns": [
                _col("system"),
                _col("model"),
                _col("batch", True),
                _col("figure"),
                _col("before"),
                _col("after"),
                _col("before ms", True),
                _col("after ms", True),
                _col("after / before", True),
            ],
            "rows": [
                [
                    self.system_cell(c.system, root),
                    _c(c.model, href=self.model_link(c.model, root)),
                    _c(c.batch_size, num=True),
                    _c(c.figure),
                    _c(c.before_stack),
                    _c(c.after_stack),
                    _c(c.before_ms, num=True),
                    _c(c.after_ms, num=True),
                    _c(f"{c.ratio:.3f}", cls="num bad" if c.ratio > 1 else "num good" if c.ratio < 1 else "num"),
                ]
                for c in s.changes[:50]
            ],
        }
        systems = {
            "csv": self.csv("systems", [_system_row(r) for r in s.systems], root),
            "columns": [
                _col("system"),
                _col("kind"),
                _col("hardware"),
                _col("current stack"),
                _col("stacks", True),
                _col("records (current)", True),
                _col("records (all stacks)", True),
                _col("corpus coverage", True),
            ],
            "rows": [
                [
                    self.system_cell(r.name, root),
                    _c(r.hardware.get("kind")),
                    _c(_hardware(r.hardware)),
                    _c(r.latest_stack_id),
                    _c(len(r.stacks), num=True),
                    _c(_total(r.counts), num=True),
                    _c(_total(r.counts_all_stacks), num=True),
                    _c(
                        fmt_coverage(r.coverage.share) if r.coverage and r.coverage.share is not None else "-", num=True
                    ),
                ]
                for r in s.systems
            ],
        }
        by_model: dict[str, list[ModelFigures]] = defaultdict(list)
        for m in s.models:
            by_model[m.model].append(m)
        models = {
            "caption": "coverage: share of the model's nodes with a kernel time on each system's latest stack",
            "csv": self.csv(
                "models",
                [
                    {
                        "model": m.model,
                        "batch_size": m.batch_size,
                        "layers": m.layers,
                        "unique_layers": m.unique_layers,
                        "not_benchmarked": len(m.not_benchmarked),
                        "coverage": {f.row.system: f.row.coverage for f in m.latest},
                    }
                    for m in s.models
                ],
                root,
            ),
            "columns": [
                _col("model"),
                _col("batch sizes"),
                _col("layers", True),
                _col("unique layers", True),
                _col("not benchmarkable", True),
                _col("coverage"),
            ],
            "rows": [
                [
                    _c(name, href=self.model_link(name, root)),
                    _c(", ".join(str(m.batch_size) for m in ms)),
                    _c(ms[0].layers, num=True),
                    _c(ms[0].unique_layers, num=True),
                    _c(len(ms[0].not_benchmarked), num=True),
                    _c(
                        ", ".join(f"{f.row.system} {fmt_coverage(f.row.coverage)}" for f in ms[0].latest) or "no system"
                    ),
                ]
                for name, ms in by_model.items()
            ],
        }
        unmatched = {
            "csv": self.csv("unmatched_models", s.unmatched, root) if s.unmatched else None,
            "caption": None,
            "columns": [_col("stored label"), _col("batch", True), _col("model key"), _col("systems")],
            "rows": [
                [_c(u["label"]), _c(u["batch_size"], num=True), _c(u["model_key"]), _c(", ".join(u["systems"]))]
                for u in s.unmatched
            ],
        }
        records = sum(_total(r.counts_all_stacks) for r in s.systems)
        counts = (
            f"{len(s.systems)} systems, {sum(len(r.stacks) for r in s.systems)} stacks, {records:,} records; "
            f"{len(by_model)} models; {len(s.changes)} figure changes between stacks."
        )
        self.page(
            "index.html",
            "index.html",
            title="Overview",
            answers=answers,
            counts=counts,
            headline_figure=headline_figure,
            headline=headline,
            changes=changes,
            systems=systems,
            models=models,
            unmatched=unmatched,
            model_source=", ".join(s.model_paths[:3]) + (" ..." if len(s.model_paths) > 3 else ""),
        )

    def model(self, name: str, batches: Sequence[ModelFigures]) -> None:
        rel = self.model_pages[name]
        root = "../"
        key = slug(Path(rel).stem)
        answers = [a for m in batches if (a := self.answer(m, root, with_model=False))]
        latest = [(m, f) for m in batches for f in m.latest if f.row.variant is not None]
        entries = [_bound_entry(f"{f.row.system} b{m.batch_size}", f) for m, f in latest]
        bounds_figure = (
            self.figure(
                f"model_{key}_bounds",
                lambda p: site_plots.bounds_chart(entries, self.colors, p, f"{name}: lower bound vs end to end"),
                f"{name}: lower bound and end-to-end latency per system",
                root,
                data=entries,
            )
            if entries
            else None
        )
        every = [(m, r) for m in batches for r in m.every_stack]
        grans = sorted({g for _, r in every for g in r.composed_ms})
        figures = {
            "caption": f"every system and stack; {_figures_note(r for _, r in every)}; gap: end to end / lower bound",
            "csv": self.csv(f"model_{key}_figures", [r for _, r in every], root),
            "columns": [
                _col("system"),
                _col("stack"),
                _col("batch", True),
                _col("lower bound", True),
                _col("unfused", True),
                _col("parallel", True),
                *[_col(f"composed G={g}", True) for g in grans],
                _col("end to end", True),
                _col("gap", True),
                _col("coverage", True),
            ],
            "rows": [
                [
                    self.system_cell(r.system, root),
                    _c(r.stack_id),
                    _c(m.batch_size, num=True),
                    _figure(r, "sequential_ms", r.sequential_ms),
                    _figure(r, "sequential_unfused_ms", r.sequential_unfused_ms),
                    _figure(r, "parallel_ms", r.parallel_ms),
                    *[_figure(r, f"composed_ms[{g}]", r.composed_ms.get(g)) for g in grans],
                    _figure(r, "e2e_ms", r.e2e_ms),
                    _c(_ratio(r.e2e_ms, r.sequential_ms), num=True),
                    _c(fmt_coverage(r.coverage), num=True),
                ]
                for m, r in every
            ],
        }
        fastest = {
            (c.model, c.batch_size): (c.fastest.system, c.fastest.stack_id)
            for c in self.survey.comparisons
            if c.fastest is not None
        }
        breakdowns = [
            self._breakdown(
                name, key, m, f, root, chart=fastest.get((m.model, m.batch_size)) == (f.row.system, f.row.stack_id)
            )
            for m, f in latest
            if f.breakdown
        ]
        opt_rows = [f.optimizations for _, f in latest]
        opt_rows = [o for o in opt_rows if any(getattr(o, n) is not None for n in site_plots.SPEEDUPS)]
        optimizations = {
            "csv": self.csv(f"model_{key}_optimizations", opt_rows, root),
            "columns": [
                _col("system"),
                _col("batch", True),
                *[_col(n.replace("_", " "), True) for n in site_plots.SPEEDUPS],
            ],
            "rows": [
                [
                    self.system_cell(o.system, root),
                    _c(o.batch_size, num=True),
                    *[_c(_x(getattr(o, n)), num=True) for n in site_plots.SPEEDUPS],
                ]
                for o in opt_rows
            ],
        }
        optimizations_figure = (
            self.figure(
                f"model_{key}_optimizations",
                lambda p: site_plots.speedups_chart(
                    opt_rows, self.colors, p, f"{name}: what each optimisation is worth"
                ),
                f"{name}: speedup of each optimisation per system",
                root,
                data=[o.to_dict() for o in opt_rows],
            )
            if opt_rows
            else None
        )
        histories = [self._history(m, key, root) for m in batches if m.history]
        missing_rows = {
            (f.row.system, m.batch_size, x["name"], x["op_type"], x["reason"])
            for m, f in [(m, f) for m in batches for f in m.latest]
            for x in f.row.missing
        }
        missing = {
            "caption": "nodes without a kernel time on a system's latest stack, and why",
            "csv": self.csv(
                f"model_{key}_missing",
                [
                    {"system": s_, "batch_size": b, "node": n, "op_type": o, "reason": why}
                    for s_, b, n, o, why in sorted(missing_rows)
                ],
                root,
            ),
            "columns": [_col("system"), _col("batch", True), _col("node"), _col("op"), _col("reason")],
            "rows": [
                [self.system_cell(s_, root), _c(b, num=True), _c(n), _c(o), _c(why)]
                for s_, b, n, o, why in sorted(missing_rows)[:200]
            ],
        }
        checks = [f"{f.row.system} batch {m.batch_size}: {c}" for m, f in latest for c in (*f.row.checks, *f.row.notes)]
        self.page(
            rel,
            "model.html",
            title=name,
            model=name,
            answers=answers or ["No system has measured this model yet."],
            bounds_figure=bounds_figure,
            path_note=f"Planned from the model file {batches[0].path}.",
            figures=figures,
            breakdowns=breakdowns,
            optimizations=optimizations,
            optimizations_figure=optimizations_figure,
            optimizations_note=(
                "fusion: every layer alone / fused units; parallel: sequential bound / critical path; framework gap: "
                "end to end / sequential bound; algorithm selection and tensor cores need a GPU runtime's records "
                "(every candidate; the variant without tensor cores); combined: end to end / parallel bound. "
                "A blank cell is an analysis without its figures."
            ),
            histories=histories,
            missing=missing,
            checks=checks,
        )

    def _breakdown(
        self, name: str, key: str, m: ModelFigures, f: SystemFigures, root: str, chart: bool
    ) -> dict[str, Any]:
        """A system's units as a table; as a chart too for the fastest system (the one the answer names)."""
        system = f.row.system
        tag = f"{key}_{slug(system)}_b{m.batch_size}"
        units = f.breakdown
        figure = None
        if chart:
            figure = self.figure(
                f"model_{tag}_units",
                lambda p: site_plots.breakdown_chart(
                    units,
                    self.colors.get(system, "#777777"),
                    p,
                    f"{name} on {system}, batch {m.batch_size}: largest units",
                ),
                f"{name} on {system}: kernel time of the largest units",
                root,
                data=units,
            )
        table = {
            "caption": f"{len(units)} units the runtime executes, largest first; share of the sum of their kernel "
            f"times; kernel time: the 10th percentile of its samples, {INTERVAL_NOTE}",
            "csv": self.csv(f"model_{tag}_units", units, root),
            "columns": [
                _col("unit"),
                _col("op"),
                _col("input shapes"),
                _col("output shapes"),
                _col("MFLOPs", True),
                _col("kernel ms", True),
                _col("share", True),
            ],
            "rows": [
                [
                    _c(u.label.split(" (")[0]),
                    _c(u.op),
                    _c(", ".join("x".join(map(str, s)) or "scalar" for s in u.input_shapes)),
                    _c(", ".join("x".join(map(str, s)) or "scalar" for s in u.output_shapes)),
                    _c(None if u.flops is None else u.flops / 1e6, num=True),
                    _c(fmt_figure(u.kernel_ms, u.kernel_interval), num=True),
                    _c(f"{u.share:.1%}" if u.share is not None else "-", num=True),
                ]
                for u in units[:BREAKDOWN_ROWS]
            ],
        }
        return {"title": f"{system} (stack {f.row.stack_id}), batch {m.batch_size}", "figure": figure, "table": table}

    def _history(self, m: ModelFigures, key: str, root: str) -> dict[str, Any]:
        columns = list(dict.fromkeys((s, k) for h in m.history for s, k, _ in h.points))
        return {
            "caption": f"batch {m.batch_size}: kernel time (ms, p10) of the largest units on every system and stack, "
            "oldest stack first",
            "csv": self.csv(f"model_{key}_b{m.batch_size}_history", m.history, root),
            "columns": [_col("unit"), *[_col(f"{s} @{k}", True) for s, k in columns]],
            "rows": [
                [
                    _c(h.label),
                    *[_c(next((v for s, k, v in h.points if (s, k) == col), None), num=True) for col in columns],
                ]
                for h in m.history
            ],
        }

    def system(self, report) -> None:
        s = self.survey
        rel = self.system_pages[report.name]
        root = "../"
        key = slug(Path(rel).stem)
        color = self.colors.get(report.name, "#777777")
        hw = report.hardware
        facts_rows = [
            ("kind", hw.get("kind")),
            ("cpu", hw.get("cpu_model")),
            ("cores (physical/logical)", f"{fmt(hw.get('physical_cores'))}/{fmt(hw.get('logical_cores'))}"),
            ("memory (GiB)", hw["memory_bytes"] / 2**30 if hw.get("memory_bytes") else None),
            ("gpus", ", ".join(hw["gpus"]) if hw.get("gpus") else None),
            ("threads", hw.get("threads")),
            ("price per hour (USD)", hw.get("price_per_hour")),
            ("first seen", report.first_seen),
            ("last seen", report.last_seen),
            ("current stack", report.latest_stack_id),
        ]
        facts = {
            "csv": self.csv(f"system_{key}_hardware", [dict(hw)], root),
            "columns": [_col(""), _col("")],
            "rows": [[_c(k), _c(v)] for k, v in facts_rows],
        }
        flat = flatten(report.fingerprint)
        fingerprint = {
            "csv": self.csv(f"system_{key}_fingerprint", [flat], root),
            "columns": [_col("field"), _col("value")],
            "rows": [[_c(k), _c(v)] for k, v in sorted(flat.items())],
        }
        stacks = {
            "caption": "oldest first; changed: the fields that differ from the stack before",
            "csv": self.csv(f"system_{key}_stacks", report.stacks, root),
            "columns": [
                _col("stack"),
                _col("first seen"),
                _col("last seen"),
                _col("records", True),
                _col("versions"),
                _col("changed"),
            ],
            "rows": [
                [
                    _c(st.stack_id),
                    _c(st.first_seen[:19]),
                    _c(st.last_seen[:19]),
                    _c(st.records, num=True),
                    _c(", ".join(f"{k} {fmt(v)}" for k, v in st.key_versions.items())),
                    _c(
                        "first"
                        if st.previous is None
                        else "; ".join(f"{c.field}: {fmt(c.before)} -> {fmt(c.after)}" for c in st.changes)
                        or "no change"
                    ),
                ]
                for st in report.stacks
            ],
        }
        outcomes = sorted({o for per in report.counts.values() for o in per})
        counts = {
            "csv": self.csv(
                f"system_{key}_counts",
                [{"kind": kind, **per} for kind, per in report.counts.items()],
                root,
            ),
            "columns": [_col("kind"), *[_col(o, True) for o in outcomes]],
            "rows": [
                [_c(kind), *[_c(per.get(o, 0), num=True) for o in outcomes]] for kind, per in report.counts.items()
            ],
        }
        slow = report.slowest_layers
        slowest_figure = (
            self.figure(
                f"system_{key}_slowest",
                lambda p: site_plots.slowest_layers_chart(
                    [f"{x.label} b{x.batch_size}" for x in slow],
                    [x.ms for x in slow],
                    color,
                    p,
                    f"{report.name}: slowest layers",
                ),
                f"{report.name}: slowest layers by median call latency",
                root,
                data=slow,
            )
            if slow
            else None
        )
        slowest = {
            "caption": "median call latency and p10 kernel time (ms) of the layer records of the current stack",
            "csv": self.csv(f"system_{key}_slowest_layers", slow, root),
            "columns": [_col("layer"), _col("batch", True), _col("variant"), _col("call", True), _col("kernel", True)],
            "rows": [
                [_c(x.label), _c(x.batch_size, num=True), _c(x.variant), _c(x.ms, num=True), _c(x.kernel_ms, num=True)]
                for x in slow
            ],
        }
        mine = [(c, e) for c in s.comparisons for e in c.systems if e.system == report.name]
        priced = [(c, e) for c, e in mine if e.cost_per_1000 is not None]
        cost = {
            "caption": "USD per 1000 inferences at the configured price: price per hour / 3600 x latency (s) x 1000, "
            "with the end-to-end latency where measured, else the lower bound",
            "csv": self.csv(
                f"system_{key}_cost",
                [{"model": c.model, "batch_size": c.batch_size, **e.to_dict()} for c, e in priced],
                root,
            ),
            "empty": "No price is configured for this system (a fleet config's price_per_hour): no cost to show.",
            "columns": [
                _col("model"),
                _col("batch", True),
                _col("USD per hour", True),
                _col("latency ms", True),
                _col("basis"),
                _col("USD per 1000", True),
            ],
            "rows": [
                [
                    _c(c.model, href=self.model_link(c.model, root)),
                    _c(c.batch_size, num=True),
                    _c(e.price_per_hour, num=True),
                    _c(getattr(e, e.cost_basis) if e.cost_basis else None, num=True),
                    _c("end to end" if e.cost_basis == "e2e_ms" else "lower bound"),
                    _c(f"{e.cost_per_1000:.4g}", num=True),
                ]
                for c, e in priced
            ],
        }
        cov = report.coverage
        answer = (
            f"{report.name}: {_hardware(hw) or 'hardware unknown'}; {len(report.stacks)} stack(s), current "
            f"{report.latest_stack_id or '-'}; "
            + (
                f"{cov.covered:,} of the corpus's {cov.unique_layers:,} unique layers measured "
                f"({fmt_coverage(cov.share)})."
                if cov and cov.share is not None
                else "no corpus coverage."
            )
        )
        self.page(
            rel,
            "system.html",
            title=report.name,
            name=report.name,
            color=color,
            answer=answer,
            facts=facts,
            fingerprint=fingerprint,
            stacks=stacks,
            counts=counts,
            slowest_figure=slowest_figure,
            slowest=slowest,
            cost=cost,
        )

    def corpus(self) -> None:
        c, root = self.survey.corpus, ""
        models = {
            "csv": self.csv("corpus_models", [_model_count(m) for m in c.models], root),
            "columns": [
                _col("model"),
                _col("layers", True),
                _col("unique layers", True),
                _col("not benchmarkable", True),
            ],
            "rows": [
                [
                    _c(m.model, href=self.model_link(m.model, root)),
                    _c(m.layers, num=True),
                    _c(m.unique_layers, num=True),
                    _c(m.unsupported, num=True),
                ]
                for m in c.models
            ]
            + [[_c("corpus"), _c(c.layers, num=True), _c(c.unique_layers, num=True), _c("")]],
        }
        ops = [(o.op_type, o.layers, o.unique_layers) for o in c.by_op]
        by_op = {
            "csv": self.csv(
                "corpus_by_op",
                [
                    {"op_type": o.op_type, "layers": o.layers, "unique_layers": o.unique_layers, "repeats": o.repeats}
                    for o in c.by_op
                ],
                root,
            ),
            "columns": [_col("op"), _col("layers", True), _col("unique", True), _col("repeats", True)],
            "rows": [
                [_c(o.op_type), _c(o.layers, num=True), _c(o.unique_layers, num=True), _c(o.repeats, num=True)]
                for o in c.by_op
            ],
        }
        repeats_figure = (
            self.figure(
                "corpus_repeats", lambda p: site_plots.repeats_chart(ops, p), "repeats by op type", root, data=ops
            )
            if ops
            else None
        )
        heatmap_figure = (
            self.figure(
                "corpus_jaccard",
                lambda p: _heatmap(c, p),
                "Jaccard similarity of the models' layer sets",
                root,
                data=(tuple(m.model for m in c.models), c.jaccard),
            )
            if c.models
            else None
        )
        names = [m.model for m in c.models]
        jaccard = {
            "csv": self.csv(
                "corpus_jaccard",
                [{"model": n, **dict(zip(names, row, strict=True))} for n, row in zip(names, c.jaccard, strict=True)],
                root,
            ),
            "columns": [_col("model"), *[_col(str(i + 1), True) for i in range(len(names))]],
            "rows": [
                [_c(f"{i + 1} {n}"), *[_c(f"{v:.2f}", num=True) for v in row]]
                for i, (n, row) in enumerate(zip(names, c.jaccard, strict=True))
            ],
        }
        share = 1 - c.unique_layers / c.layers if c.layers else 0.0
        answer = (
            f"{len(c.models)} models, {c.layers:,} layers of which {c.unique_layers:,} are unique: benchmarking "
            f"unique layers measures {share:.0%} fewer layers than benchmarking every one."
        )
        self.page(
            "corpus.html",
            "corpus.html",
            title="Corpus",
            answer=answer,
            models=models,
            by_op=by_op,
            repeats_figure=repeats_figure,
            heatmap_figure=heatmap_figure,
            jaccard=jaccard,
        )

    def draw(self) -> None:
        """Render every queued figure (one after another: pyplot is not thread-safe)."""
        for plot in self.plots:
            plot()
        self.manifest.parent.mkdir(parents=True, exist_ok=True)
        self.manifest.write_text(json.dumps(self.drawn, indent=0, sort_keys=True))


def _heatmap(corpus, path: Path) -> Path:
    from benanza.report.plots import similarity_heatmap

    site_plots._pyplot()  # the site's style
    return similarity_heatmap(corpus, path)


def _model_count(m) -> dict[str, Any]:
    return {"model": m.model, "layers": m.layers, "unique_layers": m.unique_layers, "unsupported": m.unsupported}


def _bound_entry(label: str, figure: SystemFigures) -> site_plots.BoundsRow:
    """One row of a bounds chart: the sequential bound, the composition at the smallest G and end to end."""
    row = figure.row
    g = min(row.composed_ms) if row.composed_ms else None
    composed = None if g is None else _with_interval(row, f"composed_ms[{g}]", row.composed_ms[g])
    disturbed = [name for name in ("sequential_ms", "e2e_ms") if name in row.disturbed]
    if g is not None and f"composed_ms[{g}]" in row.disturbed:
        disturbed.append("composed")
    return site_plots.BoundsRow(
        label=label,
        system=row.system,
        bound=_with_interval(row, "sequential_ms", row.sequential_ms),
        composed=composed,
        e2e=_with_interval(row, "e2e_ms", row.e2e_ms),
        disturbed=tuple(disturbed),
    )


def _with_interval(row: LowerBound, figure: str, value: float | None) -> Interval | None:
    """``figure`` with its interval; a figure stored without one is a point (no error bar)."""
    if value is None:
        return None
    return row.interval(figure) or Interval.point(value)


def _ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:.2f}x" if num is not None and den else "-"


def _x(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def _total(counts: Mapping[str, Mapping[str, int]]) -> int:
    return sum(n for per in counts.values() for n in per.values())


def _hardware(hw: Mapping[str, Any]) -> str:
    parts = [hw.get("cpu_model") or ""]
    if hw.get("logical_cores"):
        parts.append(f"{hw['logical_cores']} logical cores")
    if hw.get("gpus"):
        parts.append(", ".join(hw["gpus"]))
    return ", ".join(p for p in parts if p)


def _system_row(r) -> dict[str, Any]:
    return {
        "system": r.name,
        "hardware": dict(r.hardware),
        "latest_stack_id": r.latest_stack_id,
        "stacks": len(r.stacks),
        "records": _total(r.counts),
        "records_all_stacks": _total(r.counts_all_stacks),
        "coverage": r.coverage.to_dict() if r.coverage else None,
    }


def write_site(survey: Survey, out: Path) -> SiteFiles:
    """Write the site for ``survey`` into ``out`` (created; files of an earlier report are replaced).

    Raises:
        UsageError: ``out`` is a file, or cannot be written.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: --out must be a folder, and this is a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
        site = _Site(survey, out)
        site.index()
        by_model: dict[str, list[ModelFigures]] = defaultdict(list)
        for m in survey.models:
            by_model[m.model].append(m)
        for name, batches in by_model.items():
            site.model(name, batches)
        for report in survey.systems:
            site.system(report)
        site.corpus()
        site.draw()
    except OSError as exc:
        raise UsageError(f"{out}: cannot write the report: {exc.strerror or exc}") from None
    return SiteFiles(out, tuple(site.pages), tuple(site.figures), tuple(site.tables))
