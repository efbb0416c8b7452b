"""What ONNX Runtime's default level gains over the level benanza measures layers at, per model.

benanza measures layers at ORT's ``extended`` level by default: at ``all`` (ORT's default, what a
user who opens an ``InferenceSession`` without options runs) float32 convolutions run in NCHWc
blocks and int8 ones in NHWC from one layer to the next, and float16 weights are converted once
at load, none of which a layer measured alone can show. So each model is also measured end to end
at ``all`` (``defaults`` in the lower-bound table). This script runs the main job (``benanza run``)
twice over the same models, one run after the other, into fresh databases:

- at the default level (``extended``): the sequential bound, the composition at G = 1, the end to
  end, and the end to end at the defaults (``defaults_e2e_ms``);
- at ``--opt-level all``: the same figures with the layers at ``all`` (groups read without ORT's
  layout transformers, the layout conversions a layer alone pays left out of its kernel time).

Printed and saved per model: those figures and their ratios, and whether a ``check`` or a note
fired. JSON to ``benchmarks/results/runtime_defaults.json`` (``--tag`` adds a suffix).

    python benchmarks/runtime_defaults.py [--models zoo,corpus] [--tag T]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from side_by_side import save_results

from benanza.model.zoo import zoo_paths

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "models"
# the corpus's convolution networks in each precision, and a float16 transformer: what the defaults change
CORPUS_VISION = [
    "resnet50",
    "resnet50_fp16",
    "resnet50_int8_qdq",
    "resnet50_int8_qop",
    "mobilenetv3_large_100",
    "efficientnet_b0_int8_qdq",
    "convnext_tiny",
]
CORPUS_TEXT = ["bert_fp16"]
TEXT_SHAPES = ["--shape", "input_ids=1x128", "--shape", "attention_mask=1x128"]


def run(models: list[Path], level: str, db: Path, extra: list[str]) -> tuple[list[dict[str, Any]], float]:
    """``benanza run`` of ``models`` at ``level`` into ``db``: its JSON rows and wall seconds."""
    command = [sys.executable, "-m", "benanza", "run", *map(str, models), "--db", f"sqlite:///{db}"]
    command += ["--opt-level", level, "--format", "json", *extra]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"benanza run failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout), wall


def figures(row: dict[str, Any]) -> dict[str, Any]:
    composed = row.get("composed_ms") or {}
    return {
        "sequential_ms": row["sequential_ms"],
        "composed_g1_ms": composed.get("1"),
        "e2e_ms": row["e2e_ms"],
        "defaults_e2e_ms": row.get("defaults_e2e_ms"),
        "checks": len(row.get("checks") or []),
        "notes": len(row.get("departures") or []) + len(row.get("defaults_notes") or []),
        "disturbed": row.get("disturbed") or [],
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="zoo,corpus", help="zoo, corpus or both (comma-separated)")
    parser.add_argument("--tag", default="", help="suffix of the results file")
    args = parser.parse_args()
    sets = set(args.models.split(","))
    batches: list[tuple[list[Path], list[str]]] = []
    if "zoo" in sets:
        batches.append((zoo_paths(), []))
    if "corpus" in sets:
        batches.append(([CORPUS / f"{m}.onnx" for m in CORPUS_VISION], []))
        batches.append(([CORPUS / f"{m}.onnx" for m in CORPUS_TEXT], TEXT_SHAPES))
    rows: dict[str, dict[str, Any]] = {}
    walls: dict[str, float] = {"extended": 0.0, "all": 0.0}
    with tempfile.TemporaryDirectory(prefix="benanza-defaults-") as tmp:
        for level in ("extended", "all"):
            for n, (models, extra) in enumerate(batches):
                found, wall = run(models, level, Path(tmp) / f"{level}{n}.db", extra)
                walls[level] += wall
                for row in found:
                    rows.setdefault(row["model"], {})[level] = figures(row)
    out = []
    print(f"{'model':34s} {'bound':>7s} {'e2e':>7s} {'dflt':>7s} dflt/e2e dflt/bnd | all: bound/e2e comp/e2e")
    for model, by_level in rows.items():
        ext, at_all = by_level.get("extended", {}), by_level.get("all", {})
        entry = {
            "model": model,
            "extended": ext,
            "all": at_all,
            "defaults_over_e2e": ratio(ext.get("defaults_e2e_ms"), ext.get("e2e_ms")),
            "defaults_over_bound": ratio(ext.get("defaults_e2e_ms"), ext.get("sequential_ms")),
            "all_bound_over_e2e": ratio(at_all.get("sequential_ms"), at_all.get("e2e_ms")),
            "all_composed_over_e2e": ratio(at_all.get("composed_g1_ms"), at_all.get("e2e_ms")),
        }
        out.append(entry)

        def f(v: float | None, spec: str = "7.2f") -> str:
            return format(v, spec) if v is not None else "-".rjust(7)

        print(
            f"{model:34s} {f(ext.get('sequential_ms'))} {f(ext.get('e2e_ms'))} {f(ext.get('defaults_e2e_ms'))} "
            f"{f(entry['defaults_over_e2e'], '8.2f')} {f(entry['defaults_over_bound'], '8.2f')} | "
            f"{f(entry['all_bound_over_e2e'], '10.2f')} {f(entry['all_composed_over_e2e'], '8.2f')}"
        )
    path = save_results("runtime_defaults", args.tag, {"wall_s": walls, "models": out})
    print(f"wall: extended {walls['extended']:.0f} s, all {walls['all']:.0f} s; saved {path}")


if __name__ == "__main__":
    main()
