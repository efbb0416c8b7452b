"""Figures printed with their intervals (issue 16): ``42.1 ± 0.4``, disturbed ones marked."""

from __future__ import annotations

import dataclasses
import io

from benanza.analysis.lower_bound import LowerBound
from benanza.bench.stats import Interval
from benanza.report.bench import lower_bound_table
from benanza.report.output import console, fmt_interval, write_csv


def test_value_and_half_width_at_one_precision() -> None:
    assert fmt_interval(42.1234, 41.7, 42.5) == "42.1 ± 0.4"
    assert fmt_interval(196.4, 193.0, 199.0) == "196 ± 3"
    assert fmt_interval(0.12345, 0.1200, 0.1280) == "0.123 ± 0.004"
    assert fmt_interval(1234.5, 1200.0, 1270.0) == "1,234 ± 35"
    # a width that rounds to nothing at three digits gets the digits it needs
    assert fmt_interval(42.1234, 42.12, 42.13) == "42.123 ± 0.005"
    assert fmt_interval(5.0, 5.0, 5.0) == "5.00 ± 0.00"
    assert fmt_interval(5.0) == "5"
    assert fmt_interval(None) == "-"


ROW = LowerBound(
    model="m",
    system="s",
    stack_id="k",
    runtime="onnxruntime",
    variant="",
    batch_size=1,
    sequential_ms=10.0,
    sequential_unfused_ms=None,
    parallel_ms=8.0,
    partial_sequential_ms=10.0,
    e2e_ms=12.5,
    e2e_kernel_ms=None,
    composed_ms={1: 12.0},
    coverage=1.0,
    missing=(),
    intervals={
        "sequential_ms": Interval(10.0, 9.8, 10.2),
        "parallel_ms": Interval(8.0, 7.9, 8.1),
        "e2e_ms": Interval(12.5, 12.2, 12.8),
    },
    composed_intervals={1: Interval(12.0, 11.5, 12.5)},
)


def test_table_prints_every_figure_with_its_interval_and_marks_disturbed_ones() -> None:
    out = io.StringIO()
    console(out, width=200).print(lower_bound_table([ROW]))
    text = out.getvalue()
    for cell in ("10.0 ± 0.2", "8.00 ± 0.10", "12.0 ± 0.5", "12.5 ± 0.3"):
        assert cell in text
    assert "disturbed" not in text
    out = io.StringIO()
    console(out, width=240).print(lower_bound_table([dataclasses.replace(ROW, disturbed=("e2e_ms",))]))
    assert "12.5 ± 0.3 (disturbed)" in out.getvalue()
    assert "10.0 ± 0.2 (disturbed)" not in out.getvalue()


def test_json_and_csv_carry_low_and_high() -> None:
    doc = ROW.to_dict()
    assert doc["intervals"]["e2e_ms"] == {"low": 12.2, "high": 12.8}
    assert doc["intervals"]["composed_ms"]["1"] == {"low": 11.5, "high": 12.5}
    out = io.StringIO()
    write_csv([doc], out)
    header, line = out.getvalue().splitlines()
    columns = header.split(",")
    assert "intervals.e2e_ms.low" in columns and "intervals.composed_ms.1.high" in columns
    assert dict(zip(columns, line.split(","), strict=False))["intervals.e2e_ms.high"] == "12.8"


def test_rows_in_several_variants_say_which_is_which() -> None:
    from benanza.report.output import variant_column

    on, off = "precision=float32,tensor_cores=True,timing=hot", "precision=float32,tensor_cores=False,timing=hot"
    assert variant_column([on, on]) == ("variant", {})  # one variant: no column
    assert variant_column([on, off, on]) == ("tensor cores", {on: "True", off: "False"})
    half = "precision=float16,tensor_cores=True,timing=hot"
    assert variant_column([half, off])[1] == {
        half: "precision=float16,tensor_cores=True",
        off: "precision=float32,tensor_cores=False",
    }
    out = io.StringIO()
    rows = [dataclasses.replace(ROW, variant=on), dataclasses.replace(ROW, variant=off, sequential_ms=30.0)]
    console(out, width=240).print(lower_bound_table(rows))
    text = out.getvalue()
    assert "tensor cores" in text
    lines = [line for line in text.splitlines() if "True" in line or "False" in line]
    assert len(lines) == 2 and "True" in lines[0] and "10.0" in lines[0] and "30.0" in lines[1]
    out = io.StringIO()
    console(out, width=240).print(lower_bound_table([ROW]))
    assert "variant" not in out.getvalue()
