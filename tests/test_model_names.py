"""Models named apart: files of one stem in several folders (``<model>/model.onnx``, as
onnxruntime-genai and Optimum write them) get names of their own, in a run, in the store
(``Store.model_names``), in the report and in ``--models`` selections; a stored model keeps its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benanza.cli import app
from benanza.model.names import NamedModel, distinct_names, same_file
from benanza.store import open_store

SYSTEM = "names-test-system"
ENV = {
    "BENANZA_DB": None,
    "BENANZA_SYSTEM": SYSTEM,
    "BENANZA_HARNESS_WARMUP_RUNS": "1",
    "BENANZA_HARNESS_MIN_SAMPLES": "3",
    "BENANZA_HARNESS_KERNEL_RUNS": "3",
}
FAST = ["--min-time", "0.001", "--max-time", "0.02", "--threads", "1", "--granularity", "1"]


def test_a_stem_alone_names_its_model():
    assert distinct_names([("/m/resnet50.onnx", "a"), ("/m/bert.onnx", "b")]) == ["resnet50", "bert"]


def test_files_of_one_stem_are_named_by_the_shortest_tail_that_sets_them_apart():
    found = distinct_names([("/x/llama_int4/model.onnx", "a"), ("/x/llama_fp32/model.onnx", "b"), ("/x/r.onnx", "c")])
    assert found == ["llama_int4/model", "llama_fp32/model", "r"]
    # the Hub's layout: the folder above the file is alike too
    found = distinct_names([("/hub/bert/onnx/model.onnx", "a"), ("/hub/gpt2/onnx/model.onnx", "b")])
    assert found == ["bert/onnx/model", "gpt2/onnx/model"]


def test_one_file_at_several_bindings_is_one_model():
    # batch 1 and batch 8 of one file: two keys, one name
    assert distinct_names([("/x/a/model.onnx", "b1"), ("/x/a/model.onnx", "b8")]) == ["model", "model"]


def test_a_stored_model_keeps_its_name_and_a_new_one_is_named_apart_from_it():
    stored = [NamedModel("model", "int4", "/x/llama_int4/model.onnx")]
    # another model of that stem: apart from the stored one
    assert distinct_names([("/x/llama_fp32/model.onnx", "fp32")], stored) == ["llama_fp32/model"]
    # the stored file, exported again (another key): its stored name, so its history goes on under it
    assert distinct_names([("/x/llama_int4/model.onnx", "int4-v2")], stored) == ["model"]
    # the stored graph from another checkout (the same key): its stored name
    assert distinct_names([("/elsewhere/model.onnx", "int4")], stored) == ["model"]
    # a stem that a stored model's qualified name ends in is no name for a new model alone
    qualified = [NamedModel("a/model", "a", "/x/a/model.onnx"), NamedModel("b/model", "b", "/x/b/model.onnx")]
    assert distinct_names([("/x/c/model.onnx", "c")], qualified) == ["c/model"]
    # a qualified stored name is kept as well
    qualified = [NamedModel("llama_fp32/model", "fp32", "/x/llama_fp32/model.onnx")]
    assert distinct_names([("/x/llama_fp32/model.onnx", "fp32")], qualified) == ["llama_fp32/model"]


def test_a_path_that_cannot_be_told_apart_by_its_folders_still_gets_a_name_of_its_own():
    stored = [NamedModel("model", "a", "/q/model.onnx")]
    assert distinct_names([("/model.onnx", "b")], stored) == ["model~2"]


def test_same_file_compares_paths_as_given_and_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert same_file("a/model.onnx", str(tmp_path / "a" / "model.onnx"))
    assert same_file("a/../a/model.onnx", "a/model.onnx")
    assert not same_file("a/model.onnx", "b/model.onnx")


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def json_of(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def two_models(tmp_path, conv_chain) -> tuple[Path, Path]:
    """Two different models, both ``model.onnx``, in folders ``reshape`` and ``maxpool``."""
    files = []
    for tail in ("reshape", "maxpool"):
        (tmp_path / tail).mkdir()
        path = tmp_path / tail / "model.onnx"
        path.write_bytes(conv_chain(tail).SerializeToString())
        files.append(path)
    return files[0], files[1]


def test_the_main_job_names_two_models_of_one_stem_apart_and_the_report_gives_each_its_page(tmp_path, two_models):
    reshape, maxpool = two_models
    uri = f"sqlite:///{tmp_path / 'names.db'}"
    rows = json_of(invoke("run", reshape, maxpool, "--db", uri, *FAST, "--format", "json"))
    assert [r["model"] for r in rows] == ["reshape/model", "maxpool/model"]
    with open_store(uri, read_only=True) as store:
        assert {m.name for m in store.model_names()} == {"reshape/model", "maxpool/model"}
        # each name holds its own model (their bounds may coincide: the profiler counts whole microseconds)
        ops = {p.model: {layer.op_type for layer in p.graph.layers} for p in store.plans()}
    assert "MaxPool" in ops["maxpool/model"] and "MaxPool" not in ops["reshape/model"]
    # a file selects its own model, not every model of its stem
    picked = json_of(invoke("analyze", "lower-bound", maxpool, "--db", uri, "--format", "json"))
    assert [r["model"] for r in picked] == ["maxpool/model"]
    site = tmp_path / "site"
    result = invoke("report", "--db", uri, "--out", site)
    assert result.exit_code == 0, result.output
    pages = sorted(p.name for p in (site / "models").glob("*.html"))
    assert pages == ["maxpool_model.html", "reshape_model.html"]
    assert "maxpool/model" in (site / "models" / "maxpool_model.html").read_text()


def test_runs_apart_name_a_second_model_of_a_stem_apart_and_keep_the_first_ones_name(tmp_path, two_models):
    reshape, maxpool = two_models
    uri = f"sqlite:///{tmp_path / 'apart.db'}"
    assert [r["model"] for r in json_of(invoke("run", reshape, "--db", uri, *FAST, "--format", "json"))] == ["model"]
    second = json_of(invoke("run", maxpool, "--db", uri, *FAST, "--format", "json"))
    assert [r["model"] for r in second] == ["maxpool/model"]
    # the first again, with the second: it keeps the name it was stored under, and reuses its results
    again = json_of(invoke("run", reshape, maxpool, "--db", uri, *FAST, "--format", "json"))
    assert [r["model"] for r in again] == ["model", "maxpool/model"]
    picked = json_of(invoke("analyze", "lower-bound", reshape, "--db", uri, "--format", "json"))
    assert [r["model"] for r in picked] == ["model"]
    by_name = json_of(invoke("analyze", "lower-bound", "maxpool/model", "--db", uri, "--format", "json"))
    assert [r["model"] for r in by_name] == ["maxpool/model"]


def test_split_and_dedup_name_files_of_one_stem_apart(tmp_path, two_models):
    reshape, maxpool = two_models
    out = tmp_path / "out"
    done = json_of(invoke("models", "split", reshape, maxpool, "--batch", "1", "--out", out, "--format", "json"))
    folders = {str(Path(s["path"]).parent.relative_to(out)) for s in done["sequences"]}
    assert folders == {"reshape/model", "maxpool/model"}
    assert {s["model"] for s in done["sequences"]} == {"reshape/model", "maxpool/model"}
    dedup = json_of(invoke("models", "dedup", reshape, maxpool, "--batch", "1", "--format", "json"))
    assert [m["model"] for m in dedup["models"]] == ["reshape/model", "maxpool/model"]
