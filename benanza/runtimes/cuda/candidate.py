"""Candidates: the ways a library can run one layer, and what their measurements say.

A ``Candidate`` is one algorithm (legacy cuDNN ``cudnnConvolutionFwdAlgo_t``), engine
configuration (cuDNN graph API plan), cublasLt algorithm or framework kernel, already
built: ``launch`` enqueues one run on the benchmark's private stream and returns at once
(no synchronisation; the timer owns that). Building a plan is never timed.

``CandidateResult`` is one candidate's timing; ``summarise`` turns a layer's results into
the plain data stored with its record: every candidate, the fastest (Benanza's "best
algorithm"), the one the library's heuristic picks as a framework would (``default``), and
the ratio between them. Pure: no GPU library is imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from benanza.bench.stats import SampleStats


@dataclass(frozen=True, slots=True)
class Candidate:
    source: str  # cudnn-legacy, cudnn-graph, cublaslt, cublas, cupy
    name: str  # stable across runs of one stack: algorithm enum name, plan name, algo id + config
    launch: Callable[[], None] = field(compare=False, repr=False)
    workspace_bytes: int = 0
    tensor_cores: bool | None = None  # None: the library does not say
    heuristic_rank: int | None = None  # position in the library's heuristic order
    default: bool = False  # the pick a framework makes (first heuristic choice that builds)
    notes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.source}:{self.name}"


@dataclass(frozen=True, slots=True)
class CandidateResult:
    """One candidate's measurement (seconds per run) or the error that stopped it."""

    source: str
    name: str
    workspace_bytes: int = 0
    tensor_cores: bool | None = None
    heuristic_rank: int | None = None
    default: bool = False
    samples: tuple[float, ...] = ()
    stats: SampleStats | None = None
    error: str | None = None
    hot_mode: str | None = None  # graph (CUDA graph replays) or stream (plain launches: capture failed)
    spent_s: float | None = None  # wall time of its hot measurement (capture, calibration, samples), failed or not

    @classmethod
    def of(cls, candidate: Candidate, **measured: Any) -> CandidateResult:
        return cls(
            source=candidate.source,
            name=candidate.name,
            workspace_bytes=candidate.workspace_bytes,
            tensor_cores=candidate.tensor_cores,
            heuristic_rank=candidate.heuristic_rank,
            default=candidate.default,
            **measured,
        )

    @property
    def label(self) -> str:
        return f"{self.source}:{self.name}"

    @property
    def median(self) -> float | None:
        return float(self.stats.median) if self.stats is not None and self.error is None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "name": self.name,
            "workspace_bytes": self.workspace_bytes,
            "tensor_cores": self.tensor_cores,
            "heuristic_rank": self.heuristic_rank,
            "default": self.default,
            "stats": self.stats.to_dict() if self.stats is not None else None,
            "error": self.error,
            "hot_mode": self.hot_mode,
            "spent_s": self.spent_s,
        }


def dedupe(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Candidates by label, first occurrence kept (heuristic modes list the same plans)."""
    seen: dict[str, Candidate] = {}
    for c in candidates:
        seen.setdefault(c.label, c)
    return list(seen.values())


def mark_default(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Exactly one default per source: the one flagged, else the best-ranked, else the first."""
    out: list[Candidate] = []
    by_source: dict[str, list[Candidate]] = {}
    for c in candidates:
        by_source.setdefault(c.source, []).append(c)
    chosen: set[str] = set()
    for group in by_source.values():
        flagged = [c for c in group if c.default]
        ranked = sorted((c for c in group if c.heuristic_rank is not None), key=lambda c: c.heuristic_rank or 0)
        pick = (flagged or ranked or group)[0]
        chosen.add(pick.label)
    for c in candidates:
        want = c.label in chosen
        out.append(c if c.default == want else replace(c, default=want))
    return out


def _rank(r: CandidateResult) -> int:
    return r.heuristic_rank if r.heuristic_rank is not None else 1 << 30


def summarise(results: Sequence[CandidateResult], primary_source: str | None = None) -> dict[str, Any]:
    """What a layer's record stores about its candidates.

    Args:
        results: every candidate's result, failed ones included (with their error).
        primary_source: the source whose default is "the framework's pick" (e.g. cudnn-legacy,
            as ONNX Runtime and PyTorch call it); default: the first source listed.

    Returns:
        ``candidates`` (all, as dicts, fastest first, failures last), ``best`` and ``default``
        labels with their medians (seconds), ``default_over_best`` (>= 1: what the heuristic
        leaves on the table), and counts. When the heuristic's pick failed, ``default`` is the
        next ranked candidate that ran, as a framework would fall back, and
        ``default_fallback`` is true.
    """
    ok = [r for r in results if r.median is not None]
    ordered = sorted(ok, key=lambda r: r.median or 0.0) + [r for r in results if r.median is None]
    sources = [r.source for r in results]
    primary = primary_source if primary_source in sources else (sources[0] if sources else None)
    default = next((r for r in ok if r.default and r.source == primary), None)
    fallback = default is None and any(r.default and r.source == primary for r in results)
    if fallback:  # the pick failed: a framework goes down the heuristic's list to the next that runs
        ranked = sorted((r for r in ok if r.source == primary and r.heuristic_rank is not None), key=_rank)
        default = ranked[0] if ranked else None
    best = ordered[0] if ok else None
    tc = [r for r in ok if r.tensor_cores]
    no_tc = [r for r in ok if r.tensor_cores is False]
    return {
        "candidates": [r.to_dict() for r in ordered],
        "measured": len(ok),
        "failed": len(results) - len(ok),
        "best": best.label if best else None,
        "best_s": best.median if best else None,
        "default": default.label if default else None,
        "default_s": default.median if default else None,
        "default_over_best": (default.median / best.median) if default and best and best.median else None,
        "default_fallback": fallback,
        "best_tensor_core_s": min((r.median or 0.0) for r in tc) if tc else None,
        "best_without_tensor_cores_s": min((r.median or 0.0) for r in no_tc) if no_tc else None,
    }
