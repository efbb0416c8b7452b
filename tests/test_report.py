"""`benanza report` (the static site) and `--format csv` of every command that prints a table.

One real SQLite store: ``sys-a`` is measured for real (ONNX Runtime, one thread, a
millisecond harness) on two small models; ``sys-b`` holds copies of its records on two
stacks (``b-old``: kernel 2 ms, call 4 ms; the later ``b-new``: kernel 0.5 ms, call 1 ms,
models end to end 4 ms, measured disturbed) with a price of USD 3.60 per hour, and
``sys-a``'s stored plans on both stacks, as its own runs would have stored them (the report
reads nothing else).

The browser test opens every page in headless Chromium (Selenium) and is skipped, with the
reason, where Chromium or its driver is not installed (``.ci/run`` installs both).
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import os
import re
import shutil
import sqlite3
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from cli_checks import one_line_error
from typer.testing import CliRunner

from benanza.bench.records import MeasurementStats
from benanza.bench.stats import describe
from benanza.cli import app
from benanza.fingerprint import stack_id, system_fingerprint
from benanza.local import bench, open_local, plan_models
from benanza.report.output import csv_cells, fmt_interval
from benanza.store import open_store

STACK_OLD = {"runtime": "onnxruntime", "onnxruntime": "1.0.0", "onnx": "1.17.0", "python": {"version": "3.11.9"}}
STACK_NEW = {**STACK_OLD, "onnxruntime": "1.1.0"}
B_OLD, B_NEW = stack_id(STACK_OLD), stack_id(STACK_NEW)
ENV = {"BENANZA_DB": None, "BENANZA_SYSTEM": None}


def _timed(record, call_s: float, kernel_s: float, disturbed: bool | None = None, **changes):
    calls, kernels = (call_s,) * 5, (kernel_s,) * 3
    return dataclasses.replace(
        record,
        samples=calls,
        stats=MeasurementStats.of(describe(calls), disturbed=disturbed),
        kernel_samples=kernels,
        kernel_stats=describe(kernels),
        **changes,
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory, conv_chain) -> list[Path]:
    folder = tmp_path_factory.mktemp("models")
    paths = [folder / "chain.onnx", folder / "pool.onnx"]
    for path, tail in zip(paths, ("reshape", "maxpool"), strict=True):
        path.write_bytes(conv_chain(tail).SerializeToString())
    return paths


@pytest.fixture(scope="module")
def db(tmp_path_factory, models, fast_harness) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('db') / 'report.db'}"
    ctx = open_local(uri, "onnxruntime", {"threads": 1}, system="sys-a", settings=fast_harness)
    try:
        plans = plan_models(models, ctx.runtime, (1,), granularities=(1, 3))
        assert bench(ctx, plans, e2e=True).failed == 0
        store = ctx.store
        store.register_system(
            "sys-b", system_fingerprint().with_config({"kind": "cpu", "price_per_hour": 3.6}).to_doc()
        )
        store.register_stack("sys-b", B_OLD, STACK_OLD)
        store.register_stack("sys-b", B_NEW, STACK_NEW)
        copies = []
        for r in store.records(system="sys-a"):
            copies.append(_timed(r, 0.004, 0.002, system="sys-b", stack_id=B_OLD))
            model = r.kind == "model"
            copies.append(
                _timed(r, 0.004 if model else 0.001, 0.0005, disturbed=model or None, system="sys-b", stack_id=B_NEW)
            )
        store.upsert(copies)
        measured = store.plans(system="sys-a")
        store.put_plans("sys-b", B_OLD, measured)
        store.put_plans("sys-b", B_NEW, measured)
    finally:
        ctx.close()
    return uri


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def json_of(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def csv_of(result) -> list[dict[str, str]]:
    assert result.exit_code == 0, result.output
    return list(csv.DictReader(io.StringIO(result.stdout)))


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def html_table(page: str, after: str) -> list[dict[str, str]]:
    """The first table after ``after`` on ``page``: one dict per row, header -> the cell's text."""
    table = page[page.index(after) :].split("<table>", 1)[1].split("</table>", 1)[0]

    def cells(row: str, tag: str) -> list[str]:
        found = re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", row, re.S)
        return [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in found]

    header, *rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    names = cells(header, "th")
    return [dict(zip(names, cells(r, "td"), strict=True)) for r in rows]


def shown(row: dict, figure: str, unit: str = "") -> str:
    """A figure of a JSON row of `analyze lower-bound` as the CLI prints it: value ± half-width, (disturbed)."""
    name, _, g = figure.partition(".")
    value = row[name][g] if g else row[name]
    if value is None:
        return "-"
    interval = row["intervals"][name][g] if g else row["intervals"][name]
    disturbed = (f"{name}[{g}]" if g else name) in row["disturbed"]
    return fmt_interval(value, interval["low"], interval["high"]) + unit + (" (disturbed)" if disturbed else "")


# headline columns -> lower-bound JSON figures
FIGURE_COLUMNS = {
    "lower bound": "sequential_ms",
    "parallel": "parallel_ms",
    "composed G=1": "composed_ms.1",
    "composed G=3": "composed_ms.3",
    "end to end": "e2e_ms",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory, db, models) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    args = ["report", "--db", db, "--out", out, "-g", "1,3", "--format", "json"]
    for m in models:
        args += ["--models", m]
    files = json_of(invoke(*args))
    assert files["index"] == str(out / "index.html")
    return out


# -- the site -----------------------------------------------------------------------------------


def test_every_page_figure_and_table_is_written(site):
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert pages == {
        "index.html",
        "corpus.html",
        "models/chain.html",
        "models/pool.html",
        "systems/sys-a.html",
        "systems/sys-b.html",
    }
    figures = list((site / "figures").glob("*.svg"))
    assert figures and all(f.read_text().lstrip().startswith("<?xml") for f in figures)
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text  # offline


def test_the_headline_is_the_analysis_the_cli_prints(site, db, models):
    """The report calls the CLI's analysis: its figures are `analyze lower-bound --system`'s, digit for digit."""
    cli = json_of(invoke("analyze", "lower-bound", *models, "--db", db, "--system", "all", "-g", "1,3", "-f", "json"))
    expected = {(r["model"], r["system"]): r for r in cli}
    rows = read_csv(site / "csv" / "headline.csv")
    assert {(r["model"], r["system"]) for r in rows} == set(expected)
    for r in rows:
        want = csv_cells(expected[(r["model"], r["system"])])
        for name in FIGURE_COLUMNS.values():
            # the figure and its interval, as `analyze lower-bound --format csv` gives them
            for column in (name, f"intervals.{name}.low", f"intervals.{name}.high"):
                assert (float(r[column]) if r[column] else "") == pytest.approx(want[column]), column
        assert json.loads(r["disturbed"]) == json.loads(want["disturbed"])
        assert float(r["confidence"]) == pytest.approx(0.95)
    b = next(r for r in rows if (r["model"], r["system"]) == ("chain", "sys-b"))
    assert float(b["sequential_ms"]) == pytest.approx(1.5)  # three units at 0.5 ms
    assert float(b["intervals.e2e_ms.low"]) == pytest.approx(4.0)  # constant samples: no width
    assert "e2e_spread.low_ms" not in b  # the interval replaced the p10-p90 spread


def test_the_headline_table_prints_every_figure_as_the_cli_does(site, db, models):
    """Each cell is the CLI's `42.1 ± 0.4` for the same figure, `(disturbed)` where the CLI marks it."""
    cli = json_of(invoke("analyze", "lower-bound", *models, "--db", db, "--system", "all", "-g", "1,3", "-f", "json"))
    expected = {(r["model"], r["system"]): r for r in cli}
    index = (site / "index.html").read_text()
    table = html_table(index, "<h2>Headline")
    assert {(r["model"], r["system"]) for r in table} == set(expected)
    assert "e2e spread" not in table[0]
    for r in table:
        want = expected[(r["model"], r["system"])]
        for column, figure in FIGURE_COLUMNS.items():
            assert r[column] == shown(want, figure), (r["model"], r["system"], column)
    widths = [r["end to end"] for r in table if r["system"] == "sys-a"]
    assert widths and all(" ± " in w and not w.endswith(" ± 0.00") for w in widths)  # real samples: a width
    assert all(r["end to end"].endswith(" ± 0.00 (disturbed)") for r in table if r["system"] == "sys-b")
    assert 'class="num disturbed"' in index
    caption = html.unescape(index)
    assert "± half-width of the 95% confidence interval" in caption and "(disturbed): the host's speed" in caption


def test_the_model_page_prints_every_stack_as_the_cli_does(site, db, models):
    argv = ("analyze", "lower-bound", *models, "--db", db, "--system", "all", "--stack", "all", "-g", "1,3")
    expected = {(r["system"], r["stack_id"]): r for r in json_of(invoke(*argv, "-f", "json")) if r["model"] == "chain"}
    table = html_table((site / "models" / "chain.html").read_text(), "every system and stack")
    assert {(r["system"], r["stack"]) for r in table} == set(expected) and len(expected) == 3
    for r in table:
        want = expected[(r["system"], r["stack"])]
        for column, figure in (*FIGURE_COLUMNS.items(), ("unfused", "sequential_unfused_ms")):
            assert r[column] == shown(want, figure), (r["system"], r["stack"], column)
    rows = read_csv(site / "csv" / "model_chain_figures.csv")
    assert {"intervals.e2e_ms.low", "intervals.e2e_ms.high", "intervals.composed_ms.3.high"} <= set(rows[0])


def test_the_bounds_chart_draws_intervals(site):
    chart = (site / "figures" / "headline.svg").read_text()
    assert "error bar: 95% interval" in chart and "disturbed measurement" in chart
    assert "p10-p90" not in chart
    page = (site / "models" / "chain.html").read_text()
    assert "Error bars: the 95% confidence interval" in page and "p10-p90 of its samples" not in page


def test_index_answers_first(site, db, models):
    """Before any table or figure: per model, the fastest system's lower bound and end-to-end latency."""
    argv = ("analyze", "lower-bound", *models, "--db", db, "--system", "all", "--compare", "-g", "1,3", "-f", "json")
    index = (site / "index.html").read_text()
    first_answer = index.index('class="answer"')
    assert first_answer < index.index("<table") and first_answer < index.index('<img class="figure"')
    rows = json_of(invoke(*(a for a in argv if a != "--compare")))
    for c in json_of(invoke(*argv)):
        best = next(r for r in rows if (r["model"], r["system"]) == (c["model"], c["fastest"]))
        sentence = index[index.index(f">{c['model']}</a> at batch 1 on {c['fastest']}") :].split("</div>")[0]
        assert f"could run in <b>{shown(best, 'sequential_ms', ' ms')}</b>" in sentence
        assert f"runs in <b>{shown(best, 'e2e_ms', ' ms')}</b> end to end" in sentence
        if best["defaults_e2e_ms"] is not None:  # the model at ONNX Runtime's default level, where it was measured
            assert f"({shown(best, 'defaults_e2e_ms', ' ms')} at its runtime's defaults" in sentence
        assert " ± " in sentence
        assert "Why not faster: the runtime" in sentence


def test_latest_changes_between_stacks(site):
    rows = read_csv(site / "csv" / "changes.csv")
    by = {(r["model"], r["figure"]): r for r in rows if r["system"] == "sys-b"}
    assert set(by) == {(m, f) for m in ("chain", "pool") for f in ("sequential_ms", "e2e_ms")}
    assert float(by[("chain", "sequential_ms")]["ratio"]) == pytest.approx(0.25)
    assert float(by[("chain", "e2e_ms")]["ratio"]) == pytest.approx(1.0)
    assert {r["before_stack"] for r in rows} == {B_OLD} and {r["after_stack"] for r in rows} == {B_NEW}
    assert "no significance test" in (site / "index.html").read_text()


def test_model_page_breakdown_and_history(site, models, db):
    units = read_csv(site / "csv" / "model_chain_sys-b_b1_units.csv")
    assert len(units) == 3  # Conv+BN+Relu fused, Conv, Reshape
    kernel = [float(r["kernel_ms"]) for r in units]
    assert kernel == sorted(kernel, reverse=True)  # largest first
    assert sum(float(r["share"]) for r in units) == pytest.approx(1.0)
    assert all(r["flops"] != "" for r in units if r["op"].startswith("Conv"))
    for r in units:  # constant samples: an interval of no width around the kernel time
        assert float(r["intervals.kernel_ms.low"]) == pytest.approx(float(r["kernel_ms"]))
        assert float(r["intervals.kernel_ms.high"]) == pytest.approx(float(r["kernel_ms"]))
    measured = read_csv(site / "csv" / "model_chain_sys-a_b1_units.csv")
    assert all(float(r["intervals.kernel_ms.low"]) <= float(r["kernel_ms"]) for r in measured)
    # each unit's interval is its record's, from its own samples (a unit of a few tenths of a
    # microsecond may have samples all alike at the profiler's 1 us resolution: no width then)
    with open_store(db, read_only=True) as store:
        [plan] = [p for p in store.plans(system="sys-a") if p.model == "chain"]
        records = {r.key: r for r in store.records(system="sys-a")}
    for row in measured:
        stats = records[plan.unit_keys[int(row["unit"])]].kernel_stats
        assert float(row["intervals.kernel_ms.low"]) == pytest.approx(stats.p10_low * 1e3)
        assert float(row["intervals.kernel_ms.high"]) == pytest.approx(stats.p10_high * 1e3)
    cells = html_table((site / "models" / "chain.html").read_text(), "Where the time goes: sys-a")
    assert len(cells) == len(measured) and "p10-p90" not in cells[0]
    assert all(" ± " in c["kernel ms"] for c in cells)
    history = read_csv(site / "csv" / "model_chain_b1_history.csv")
    points = json.loads(history[0]["points"])
    sys_b = [(p["system"], p["stack_id"]) for p in points if p["system"] == "sys-b"]
    assert sys_b == [("sys-b", B_OLD), ("sys-b", B_NEW)]
    page = (site / "models" / "chain.html").read_text()
    for heading in ("Lower bound vs composed vs end to end", "Where the time goes", "Optimisations", "history"):
        assert heading in page


def test_system_page_cost_and_stacks(site):
    cost = read_csv(site / "csv" / "system_sys-b_cost.csv")
    chain = next(r for r in cost if r["model"] == "chain")
    assert float(chain["cost_per_1000"]) == pytest.approx(3.6 / 3600 * 0.004 * 1000)
    stacks = read_csv(site / "csv" / "system_sys-b_stacks.csv")
    assert [s["stack_id"] for s in stacks] == [B_OLD, B_NEW]
    assert "no price is configured" in (site / "systems" / "sys-a.html").read_text().lower()


def test_a_stored_model_without_its_plan_is_listed(tmp_path, db):
    # as a database written before plans were stored: pool's results are there, its plans are not
    path = tmp_path / "older.db"
    shutil.copy(urlparse(db).path.removeprefix("/"), path)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM plans WHERE model = 'pool'")
    out = tmp_path / "site"
    json_of(invoke("report", "--db", f"sqlite:///{path}", "--out", out, "-f", "json"))
    unmatched = read_csv(out / "csv" / "unmatched_models.csv")
    assert [(u["label"], json.loads(u["systems"])) for u in unmatched] == [("pool", ["sys-a", "sys-b"])]
    assert "without a stored plan" in (out / "index.html").read_text()
    assert not (out / "models" / "pool.html").exists() and (out / "models" / "chain.html").exists()


def test_bad_input_is_one_line(tmp_path, db):
    result = invoke("report", "--db", db, "--out", tmp_path / "s", "--models", tmp_path / "missing.onnx")
    one_line_error(result, "no stored plan of model missing", "stored: chain, pool")
    (tmp_path / "file").write_text("x")
    result = invoke("report", "--db", db, "--out", tmp_path / "file", "--models", tmp_path / "missing.onnx")
    assert result.exit_code == 2
    missing_db = f"sqlite:///{tmp_path / 'none.db'}"
    assert invoke("report", "--db", missing_db, "--out", tmp_path / "s2").exit_code == 2
    assert not (tmp_path / "none.db").exists()


# -- the site in a real browser -------------------------------------------------------------------


def _browser_reason() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if not (shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")):
        return "no Chromium on PATH (Debian: apt-get install chromium chromium-driver)"
    if not shutil.which("chromedriver"):
        return "no chromedriver on PATH (Debian: apt-get install chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _browser_reason()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1600",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.slow
def test_every_page_loads_in_a_browser_without_errors_or_broken_links(site, browser, tmp_path):
    pages = sorted(site.rglob("*.html"))
    seen: set[Path] = set()
    for page in pages:
        browser.get(page.as_uri())
        assert browser.execute_script("return document.readyState") == "complete"
        errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert errors == [], f"{page}: {errors}"
        images = browser.execute_script(
            "return Array.from(document.images).map(i => [i.src, i.complete && i.naturalWidth > 0])"
        )
        broken = [src for src, ok in images if not ok]
        assert broken == [], f"{page}: broken images {broken}"
        links = browser.execute_script("return Array.from(document.links).map(a => a.href)")
        for href in links:
            url = urlparse(href)
            assert url.scheme == "file", f"{page}: a link leaves the site: {href}"
            target = Path(unquote(url.path))
            assert target.is_file(), f"{page}: broken link {href}"
            seen.add(target.resolve())
    assert {p.resolve() for p in pages} <= seen | {(site / "index.html").resolve()}  # every page is linked
    browser.get((site / "index.html").as_uri())
    shot = Path(os.environ.get("BENANZA_TEST_SCREENSHOTS", tmp_path)) / "report-index.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


# -- --format csv: the JSON's columns ------------------------------------------------------------


def _columns(rows) -> list[str]:
    return list(dict.fromkeys(name for r in rows for name in csv_cells(r)))


@pytest.mark.parametrize(
    "args",
    [
        ("analyze", "lower-bound", "{models}", "--db", "{db}", "--system", "all", "-g", "1,3"),
        ("analyze", "systems", "{models}", "--db", "{db}"),
        ("fleet", "status", "--models", "{model0}", "--db", "{db}"),
    ],
    ids=["lower-bound", "systems", "fleet-status"],
)
def test_csv_has_the_json_columns(args, db, models):
    expand = {"{db}": [db], "{models}": list(models), "{model0}": [models[0]]}
    argv = [a for arg in args for a in expand.get(arg, [arg])]
    rows = json_of(invoke(*argv, "-f", "json"))
    table = csv_of(invoke(*argv, "-f", "csv"))
    assert list(table[0]) == _columns(rows)
    assert len(table) == len(rows)
    first = next(iter(table[0]))
    assert [r[first] for r in table] == [str(csv_cells(r)[first]) for r in rows]


def test_csv_of_a_comparison_is_one_row_per_system(db, models):
    argv = ("analyze", "lower-bound", *models, "--db", db, "--system", "all", "--compare", "-g", "1")
    comparisons = json_of(invoke(*argv, "-f", "json"))
    table = csv_of(invoke(*argv, "-f", "csv"))
    assert len(table) == sum(len(c["systems"]) for c in comparisons)
    assert {"model", "fastest", "systems.system", "systems.cost_per_1000"} <= set(table[0])
    b = next(r for r in table if r["model"] == "chain" and r["systems.system"] == "sys-b")
    assert float(b["systems.cost_per_1000"]) == pytest.approx(3.6 / 3600 * 0.004 * 1000)


def test_csv_of_db_ls_and_models(db, models, tmp_path):
    listing = json_of(invoke("db", "ls", "--db", db, "-f", "json"))
    assert csv_of(invoke("db", "ls", "--db", db, "-f", "csv")) == [
        {k: str(v) for k, v in row.items()} for row in listing["summary"]
    ]
    inspect = json_of(invoke("models", "inspect", models[0], "-f", "json"))
    table = csv_of(invoke("models", "inspect", models[0], "-f", "csv"))
    assert list(table[0]) == _columns(inspect["layers"]) and len(table) == len(inspect["layers"])
    assert json.loads(table[0]["output_shapes"]) == inspect["layers"][0]["output_shapes"]
    dedup = csv_of(invoke("models", "dedup", *models, "-f", "csv"))
    assert [r["model"] for r in dedup] == ["chain", "pool"] and dedup[0]["jaccard.chain"] == "1.0"
    split = json_of(invoke("models", "split", *models, "-g", "2", "--out", tmp_path / "a", "-f", "json"))
    table = csv_of(invoke("models", "split", *models, "-g", "2", "--out", tmp_path / "b", "-f", "csv"))
    assert len(table) == len(split["sequences"]) and list(table[0]) == _columns(split["sequences"])


def test_why_not_faster_splits_the_gap_with_the_models_own_kernel_time():
    """Where the whole model's kernels were profiled, the runtime's own cost is what it spends beyond them,
    and kernels slower inside the model than its units alone are said apart; without that figure (a GPU
    framework's end to end), the gap to the bound is the runtime's."""
    from benanza.analysis.lower_bound import LowerBound
    from benanza.analysis.optimize import Optimizations
    from benanza.bench.stats import Interval
    from benanza.report.site import _Site
    from benanza.survey import SystemFigures

    def why(e2e_kernel):
        intervals = {"sequential_ms": Interval(0.341, 0.328, 0.354), "e2e_ms": Interval(0.626, 0.613, 0.639)}
        if e2e_kernel is not None:
            intervals["e2e_kernel_ms"] = Interval(e2e_kernel, e2e_kernel - 0.01, e2e_kernel + 0.01)
        row = LowerBound(
            "m",
            "vm",
            "s",
            "onnxruntime",
            "v",
            1,
            0.341,
            0.341,
            0.233,
            0.341,
            0.626,
            e2e_kernel,
            {},
            1.0,
            (),
            intervals=intervals,
        )
        return _Site._why(SystemFigures(row, (), Optimizations("m", "vm", "s", "v", 1, row, None, None)))

    assert "the runtime spends 0.143 ms beyond its kernels" in why(0.483)
    assert "its kernels take 1.42x as long inside the model as its units alone (0.142 ms more" in why(0.483)
    assert "inside the model" not in why(0.345)  # within the noise of the units' sum
    assert "the runtime spends 0.285 ms beyond its kernels" in why(None) and "inside the model" not in why(None)


def test_coverage_never_rounds_up_to_a_whole():
    """A Mask R-CNN missing 2 of its 625 nodes showed "100%" in the lower-bound table beside "no bound"."""
    from benanza.report.output import fmt_coverage

    assert [fmt_coverage(s) for s in (29 / 50, 0.29, 1.0, 0.9968, 623 / 625, 0.9999, 0.989, 0.634, 0.0)] == [
        "58%",
        "29%",
        "100%",
        "99.6%",
        "99.6%",
        "99.9%",
        "98%",
        "63%",
        "0%",
    ]
