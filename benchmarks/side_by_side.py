"""What the benchmark scripts share: an ONNX Runtime session on the CPU, a median call latency, a results file.

Imported by the scripts beside it (``python benchmarks/<script>.py`` puts this folder on the path).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnxruntime as ort

from benanza.runtimes.onnxruntime import session_options

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"


def ort_session(
    model: bytes | str,
    threads: int,
    profile_prefix: str | None = None,
    disabled: Sequence[str] = (),
) -> ort.InferenceSession:
    """A CPU session with the options of benanza's own at level ``extended``, its default
    (``runtimes.onnxruntime.session_options``: ``threads`` intra-op threads, one inter-op, sequential,
    no spinning); profiled into files named ``profile_prefix`` when given; without the ONNX Runtime
    optimizers named in ``disabled``."""
    options = session_options("extended", threads, profile=bool(profile_prefix))  # as every benchmark's
    if profile_prefix:
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled))


def median_call_ms(run: Callable[[], object], runs: int, warmup: int = 10) -> float:
    """Median of ``runs`` timed calls of ``run`` (ms), after ``warmup`` untimed ones."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def save_results(name: str, tag: str, doc: dict[str, Any]) -> Path:
    """``doc`` under ``benchmarks/results/<name>[_<tag>].json``, after when it was made and the command that
    made it; the path, relative to the repository."""
    command = f"python benchmarks/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:])
    stamped = {"generated_at": datetime.now(UTC).isoformat(timespec="seconds"), "command": command.strip(), **doc}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}{'_' + tag if tag else ''}.json"
    path.write_text(json.dumps(stamped, indent=2) + "\n")
    return path.relative_to(ROOT)
