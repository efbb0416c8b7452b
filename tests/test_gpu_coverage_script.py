"""benchmarks/gpu_coverage.py on corpus models: which layers the GPU runtime has a call for (no GPU needed)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "gpu_coverage.py"
CORPUS = json.loads((SCRIPT.parent.parent / "corpus" / "corpus.json").read_text())


def _coverage_module() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_coverage", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_coverage"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["gpu_coverage"]
    return module


def test_a_bert_has_a_gpu_call_for_every_layer_and_a_qoperator_resnet_says_what_it_lacks():
    coverage = _coverage_module()
    entries = {e["name"]: e for e in CORPUS}
    bert = coverage.coverage_of(entries["bert"])  # LayerNormalization, a masked softmax's Where, Gelu
    for precision in ("float32", "float16"):
        assert bert[precision]["specs"] > 20
        assert bert[precision]["with_a_call"] == bert[precision]["specs"], bert[precision]["reasons"]
    qop = coverage.coverage_of(entries["resnet18_int8_qop"])["float32"]
    assert qop["with_a_call"] < qop["specs"] and qop["skipped_by_op"]["QLinearConv"] > 0
    assert any("QLinearConv: the QOperator int8 format" in reason for reason in qop["reasons"])


def test_a_user_s_model_file_is_planned_and_nothing_is_written_unless_asked(zoo_path, tmp_path, monkeypatch, capsys):
    coverage = _coverage_module()
    zoo_path = zoo_path("squeezenet")
    monkeypatch.setattr(sys, "argv", ["gpu_coverage.py", str(zoo_path)])
    coverage.main()
    printed = capsys.readouterr().out
    assert f"{zoo_path.stem}" in printed and "specs with a GPU call" in printed
    out = tmp_path / "cov.json"
    monkeypatch.setattr(sys, "argv", ["gpu_coverage.py", str(zoo_path), "--out", str(out)])
    coverage.main()
    saved = json.loads(out.read_text())
    assert saved["totals"]["float32"]["specs"] > 0 and saved["command"].endswith(f"--out {out}")
    assert saved["models"][0]["model"] == zoo_path.stem
