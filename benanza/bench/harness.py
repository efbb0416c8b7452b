"""The timing harness: the one place that times a prepared call.

``measure`` runs a callable through three phases:

1. warm-up: ``warmup_runs`` untimed calls (lazy initialisation, caches, allocator);
2. calibration: double the calls per sample ``k`` until one sample lasts at least
   ``min_sample_time_s``, so that sub-microsecond calls are not lost in the timer's
   resolution and overhead; the last calibration sample is kept as the first sample;
3. sampling: time ``k`` back-to-back calls per sample until a stopping rule fires.

Stopping rules, checked after every sample in this order:

- ``noise``: at least ``min_samples`` samples, at least ``min_time_s`` of measured time,
  and the mean known to ``target_rel_stderr`` (stdev / sqrt(n) / mean);
- ``max_samples``: ``max_samples`` samples taken;
- ``time_cap``: ``max_time_s`` of wall time since ``measure`` began (warm-up and
  calibration count). The cap wins over ``min_samples``; at least one warm-up call and one
  sample always run, so a call longer than the cap overruns it by about two calls.

Samples are stored per call (sample duration / ``k``), in seconds.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from benanza.bench.stats import SampleStats, describe
from benanza.errors import UsageError

StopReason = Literal["noise", "time_cap", "max_samples"]
ENV_PREFIX = "BENANZA_HARNESS_"


class HarnessSettings(BaseModel):
    """How long and how carefully to measure one benchmark."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    warmup_runs: int = Field(3, ge=0, description="untimed calls before calibration")
    min_samples: int = Field(10, ge=1)
    max_samples: int = Field(100_000, ge=1)
    min_time_s: float = Field(0.05, ge=0, description="measured time before the noise rule may stop")
    max_time_s: float = Field(2.0, gt=0, description="wall-time cap per benchmark")
    target_rel_stderr: float = Field(0.01, ge=0, description="stop once the mean is known to this fraction")
    min_sample_time_s: float = Field(2e-4, ge=0, description="batch calls until one sample lasts this long")
    kernel_runs: int = Field(20, ge=0, description="profiled runs for the library's kernel time")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.min_samples > self.max_samples:
            raise ValueError(f"min_samples {self.min_samples} > max_samples {self.max_samples}")
        if self.min_time_s > self.max_time_s:
            raise ValueError(f"min_time_s {self.min_time_s} > max_time_s {self.max_time_s}")
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> HarnessSettings:
        """Defaults, overridden by ``BENANZA_HARNESS_<FIELD>`` variables, overridden by ``overrides``.

        Raises:
            UsageError: a variable or override does not validate.
        """
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = environ.get(ENV_PREFIX + name.upper())
            if raw is not None:
                values[name] = raw
        values.update(overrides)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
            raise UsageError(f"invalid harness settings: {problems}") from None


@dataclass(frozen=True, slots=True)
class Timing:
    """The raw result of ``measure``: per-call samples and how sampling ended."""

    samples: tuple[float, ...]  # seconds per call, one value per sample
    iterations: int  # calls per sample
    stats: SampleStats
    stopped_by: StopReason
    total_s: float  # wall time of the whole measurement, warm-up included

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": list(self.samples),
            "iterations": self.iterations,
            "stats": self.stats.to_dict(),
            "stopped_by": self.stopped_by,
            "total_s": self.total_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Timing:
        samples = tuple(float(x) for x in data["samples"])
        return cls(
            samples=samples,
            iterations=int(data["iterations"]),
            stats=SampleStats.from_dict(data["stats"]) if "stats" in data else describe(samples),
            stopped_by=data["stopped_by"],
            total_s=float(data["total_s"]),
        )


DEFAULT_SETTINGS = HarnessSettings()


def measure(
    fn: Callable[[], object],
    settings: HarnessSettings = DEFAULT_SETTINGS,
    *,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> Timing:
    """Time ``fn`` until the mean is known well enough or a cap is reached.

    Exceptions from ``fn`` propagate: the caller records them as a failed outcome.

    Args:
        fn: the prepared call; its return value is ignored.
        settings: warm-up, calibration and stopping rules.
        clock: a monotonic nanosecond clock; tests inject a fake one to make stopping exact.
    """
    repeat = itertools.repeat
    start = clock()
    deadline = start + round(settings.max_time_s * 1e9)

    for i in range(settings.warmup_runs):
        if i and clock() >= deadline:
            break
        fn()

    # Calibration: the sample that first reaches min_sample_time_s is already a valid sample.
    min_sample_ns = settings.min_sample_time_s * 1e9
    k = 1
    while True:
        t0 = clock()
        for _ in repeat(None, k):
            fn()
        t1 = clock()
        duration = t1 - t0
        if duration >= min_sample_ns or t1 >= deadline:
            break
        k *= 2

    durations = [duration]
    # Welford's running mean and squared deviations of the sample durations (ns).
    n, mean, m2 = 1, float(duration), 0.0
    measured_ns = duration
    min_samples, max_samples = settings.min_samples, settings.max_samples
    min_measured_ns = settings.min_time_s * 1e9
    target_sq = settings.target_rel_stderr**2
    stopped_by: StopReason
    while True:
        # stderr^2 / mean^2 <= target^2, i.e. var / n <= (target * mean)^2, without a sqrt
        if (
            n >= min_samples
            and measured_ns >= min_measured_ns
            and (n < 2 or m2 / (n - 1) / n <= target_sq * mean * mean)
        ):
            stopped_by = "noise"
            break
        if n >= max_samples:
            stopped_by = "max_samples"
            break
        if t1 >= deadline:
            stopped_by = "time_cap"
            break
        t0 = clock()
        for _ in repeat(None, k):
            fn()
        t1 = clock()
        duration = t1 - t0
        durations.append(duration)
        n += 1
        delta = duration - mean
        mean += delta / n
        m2 += delta * (duration - mean)
        measured_ns += duration

    total_s = (clock() - start) / 1e9
    scale = 1.0 / (k * 1e9)
    samples = tuple(d * scale for d in durations)
    return Timing(samples=samples, iterations=k, stats=describe(samples), stopped_by=stopped_by, total_s=total_s)
