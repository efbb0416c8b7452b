"""A record's statistics are typed values stored as the same flat documents as ever.

``tests/data/records_80e1d22.json`` holds record documents written by the code before the
statistics were typed (commit 80e1d22, ``BenchmarkRecord.to_doc`` of real measurements: ONNX
Runtime on the CPU alone and interleaved, and the GPU runtime's candidates and a view on a
fake device; samples cut to three and the spec document left out). Every one must read back
to the same bytes, and so must the older documents derived from them the way each schema
change added keys (no interference fields before d5064e5, no ``spent_s`` before 80e1d22, no
intervals before they existed).
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pytest

from benanza.bench.records import PROVENANCE_FIELDS, BenchmarkRecord, MeasurementStats, make_record
from benanza.bench.spec import BenchmarkSpec, SpecKind
from benanza.bench.stats import SAMPLE_STATISTICS, SampleStats, describe, interval_of
from benanza.errors import StoreError
from benanza.model.network import Network, NetworkTensor

PINNED = json.loads((Path(__file__).parent / "data" / "records_80e1d22.json").read_text())
INTERVAL_KEYS = tuple(k for k in SAMPLE_STATISTICS if k.endswith(("_low", "_high")))


def _without(doc: dict, part: str, keys) -> dict:
    return {**doc, part: {k: v for k, v in doc[part].items() if k not in keys}}


def _disturbed(stats: dict) -> dict:
    """A disturbed measurement's statistics: ``disturbed_reason`` follows ``disturbed``."""
    if "disturbed" not in stats:
        return stats
    out = {}
    for k, v in stats.items():
        out[k] = True if k == "disturbed" else v
        if k == "disturbed":
            out["disturbed_reason"] = "the host's speed changed by 12%"
    return out


def _older(doc: dict) -> dict[str, dict]:
    """The documents earlier schemas wrote for the same measurement."""
    return {
        "before spent_s": _without(doc, "stats", {"spent_s"}),
        "before the interference check": _without(
            doc, "stats", {"disturbed", "disturbed_reason", "cpu_share", "remeasured", "spent_s"}
        ),
        "before intervals": _without(_without(doc, "stats", INTERVAL_KEYS), "kernel_stats", INTERVAL_KEYS),
        "cpu share not taken": {**doc, "stats": {k: None if k == "cpu_share" else v for k, v in doc["stats"].items()}},
        "disturbed": {**doc, "stats": _disturbed(doc["stats"])},
        "hand-written": {**doc, "stats": {"n": 3, "median": 1e-3}, "kernel_stats": None},
        "skipped": {**doc, "outcome": "skipped", "reason": "no", "samples": [], "stats": None, "kernel_stats": None},
    }


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_document_written_before_typed_stats_reads_back_to_the_same_bytes(name):
    doc = PINNED[name]
    record = BenchmarkRecord.from_doc(doc)
    assert isinstance(record.stats, MeasurementStats) and type(record.kernel_stats) is SampleStats
    assert json.dumps(record.to_doc()) == json.dumps(doc)  # the same keys, values and order
    for why, older in _older(doc).items():
        again = BenchmarkRecord.from_doc(older).to_doc()
        assert again == older, why
        assert json.dumps(again) == json.dumps(older), why
    shuffled = {**doc, "stats": dict(reversed(doc["stats"].items()))}  # any order reads: the same document
    assert BenchmarkRecord.from_doc(shuffled).to_doc() == shuffled


def test_the_fields_read_what_the_keys_held():
    cpu = BenchmarkRecord.from_doc(PINNED["onnxruntime"])
    stored = PINNED["onnxruntime"]["stats"]
    assert (cpu.stats.n, cpu.stats.median, cpu.stats.p10_high) == (stored["n"], stored["median"], stored["p10_high"])
    assert (cpu.stats.stopped_by, cpu.stats.iterations, cpu.stats.remeasured) == (
        stored["stopped_by"],
        stored["iterations"],
        stored["remeasured"],
    )
    assert cpu.stats.disturbed is False and cpu.stats.cpu_share == stored["cpu_share"]
    assert cpu.stats.spent_s == stored["spent_s"] and dict(cpu.stats.extras) == {}
    assert cpu.kernel_stats.p10 == PINNED["onnxruntime"]["kernel_stats"]["p10"]
    gpu = BenchmarkRecord.from_doc(PINNED["cudnn"]).stats
    assert gpu.extras["algorithms"]["best"] == "cudnn-legacy:WINOGRAD" and gpu.extras["hot_modes"] == ["graph"]
    assert gpu.disturbed is None and gpu.cpu_share is None and gpu.spent_s is None  # the GPU path stores none
    with pytest.raises(TypeError):
        gpu.extras["view"] = True  # read-only
    old = BenchmarkRecord.from_doc(_older(PINNED["onnxruntime"])["before intervals"])
    assert old.stats.p10_low is None and old.kernel_stats.median_high is None
    assert interval_of(old.stats, "p10").low == interval_of(old.stats, "p10").value  # no samples given: a point
    assert interval_of(old.stats, "p10", old.samples).low <= old.stats.p10  # derived from the samples


def _spec() -> BenchmarkSpec:
    network = Network((NetworkTensor((1, 3, 8, 8), "float32"),), (), (), 1)
    return BenchmarkSpec(SpecKind.LAYER, "k", 1, "float32", "onnxruntime", (), "Conv", network=network)


def test_make_record_reads_documents_and_the_record_takes_typed_values_only():
    spec = _spec()
    record = make_record(spec, system="s", stack_id="t", outcome="ok", samples=[1.0], stats={"median": 1.0, "n": 1})
    assert record.stats == MeasurementStats(**{**dict.fromkeys(SAMPLE_STATISTICS), "median": 1.0, "n": 1})
    assert record.to_doc()["stats"] == {"n": 1, "median": 1.0}
    with pytest.raises(TypeError, match="MeasurementStats"):
        dataclasses.replace(record, stats={"median": 1.0})
    with pytest.raises(TypeError, match="SampleStats"):
        dataclasses.replace(record, kernel_stats={"median": 1.0})
    with pytest.raises(StoreError, match="invalid"):
        BenchmarkRecord.from_doc({**PINNED["onnxruntime"], "stats": [1, 2]})


def test_extras_cannot_shadow_a_named_field_and_the_value_pickles_exactly():
    with pytest.raises(ValueError, match="stopped_by"):
        MeasurementStats.of(describe([1.0]), extras={"stopped_by": "noise"})
    stats = BenchmarkRecord.from_doc(PINNED["cudnn"]).stats
    assert set(PROVENANCE_FIELDS).isdisjoint(stats.extras)
    again = pickle.loads(pickle.dumps(stats))  # Ray and the isolated process pickle records
    assert again == stats and json.dumps(again.to_doc()) == json.dumps(stats.to_doc())
    assert stats.sample_stats() == SampleStats.from_doc(PINNED["cudnn"]["stats"])
    with pytest.raises(ValueError, match="unknown statistic"):
        stats.statistic("algorithms")


@pytest.mark.parametrize("name", sorted(PINNED))
def test_reading_a_document_gives_the_value_the_constructor_gives(name):
    """``from_doc`` fills the slots directly (it is on every record a store reads): the same value as ``__init__``."""
    for older in (PINNED[name], *_older(PINNED[name]).values()):
        stats, kernel = older["stats"], older["kernel_stats"]
        if kernel is not None:
            assert SampleStats.from_doc(kernel) == SampleStats(**{**dict.fromkeys(SAMPLE_STATISTICS), **kernel})
        if stats is not None:
            named = {k: v for k, v in stats.items() if k in SAMPLE_STATISTICS or k in PROVENANCE_FIELDS}
            extras = {k: v for k, v in stats.items() if k not in named}
            built = MeasurementStats(**{**dict.fromkeys(SAMPLE_STATISTICS), **named}, extras=extras)
            read = MeasurementStats.from_doc(stats)
            assert read == built and dict(read.extras) == extras and type(read.extras) is type(built.extras)
            assert read.kept_null == {k for k, v in named.items() if v is None}
