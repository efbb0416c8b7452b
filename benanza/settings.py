"""benanza's settings: every ``BENANZA_*`` environment variable, read in one place.

``load_settings`` reads the environment once, at the edge (the CLI's root command, the fleet
driver, the public API functions), into a frozen ``Settings``; lower modules take it, or the
values from it, as parameters and never read ``os.environ``. The fleet driver hands its
``Settings`` to its workers, so a worker measures and stores as the driver was told to.

======================================  ========================================================
variable                                meaning
======================================  ========================================================
``BENANZA_SYSTEM``                      this machine's system name (default: the host name)
``BENANZA_DB``                          the database URI when no ``--db`` is given
``BENANZA_DB_FILE``                     a file holding that URI (a mounted secret); not both
``BENANZA_KEEP_REPEATS``                earlier runs kept per benchmark identity (default 10)
``BENANZA_DB_RETRY_WINDOW_S``           MongoDB: no retry starts later than this (default 20 s)
``BENANZA_SPILL_DIR``                   where fleet workers spill results the store refused
``BENANZA_HARNESS_<FIELD>``             one ``HarnessSettings`` field (``..._MAX_TIME_S``)
======================================  ========================================================

An empty variable counts as unset. An invalid value is a ``UsageError`` naming the variable.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from benanza.errors import UsageError

ENV_PREFIX = "BENANZA_"
HARNESS_ENV_PREFIX = ENV_PREFIX + "HARNESS_"
DEFAULT_KEEP_REPEATS = 10
DEFAULT_RETRY_WINDOW_S = 20.0
DEFAULT_SPILL_DIR = "benanza-spill"  # relative to the working directory

Schedule = Literal["sequential", "interleaved"]


class HarnessSettings(BaseModel):
    """How long and how carefully to measure one benchmark."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    warmup_runs: int = Field(3, ge=0, description="untimed calls before calibration")
    min_samples: int = Field(10, ge=1)
    max_samples: int = Field(100_000, ge=1)
    # 10 ms: with samples of at least ``min_sample_time_s`` that is 50 or more samples of a fast layer. At 50 ms
    # (the former default) the floor, not the noise, set the cost of most layers, and measuring ResNet-50's
    # layers twice gave no closer figures (median difference 1.9% at 50 ms, 1.3% at 10 ms, on a busy 2-core VM).
    min_time_s: float = Field(0.01, ge=0, description="measured time before the noise rule may stop")
    max_time_s: float = Field(2.0, gt=0, description="wall-time cap per benchmark")
    target_rel_stderr: float = Field(0.01, ge=0, description="stop once the mean is known to this fraction")
    min_sample_time_s: float = Field(2e-4, ge=0, description="batch calls until one sample lasts this long")
    kernel_runs: int = Field(10, ge=0, description="profiled runs for the library's kernel time")
    schedule: Schedule = Field(
        "interleaved",
        description="interleaved (default): a model's benchmarks sampled in rounds, so drift hits parts and whole "
        "alike; sequential: one benchmark after another",
    )
    interleave_precalls: int = Field(
        1, ge=0, description="interleaved: untimed calls before each sample, so it runs with its own data in cache"
    )
    interleave_group_rule: bool = Field(
        True,
        description="interleaved: stop once each call is within the target of max(itself, the group's floor), or "
        "sooner once the calls of each sum the group serves (the model end to end, its layers, its sequences, its "
        "fused groups) have errors together within the target of that sum (each within interleave_each_rel_stderr "
        "of max(itself, the floor)); false: the first rule only",
    )
    interleave_each_rel_stderr: float = Field(
        0.05, ge=0, description="interleaved group rule: the relative error each call may keep"
    )
    interleave_max_rounds: int = Field(
        40,
        ge=1,
        description="interleaved: rounds a group takes at most (never fewer than min_samples); the calls of a group "
        "that has not settled by then keep the wider intervals they have",
    )
    evict_streamed_weights: bool = Field(
        True,
        description="time a layer that streams its weights (each used in at most 8 multiply-adds, 1 MiB or more: "
        "a fully connected layer at batch 1) with them out of the host's caches before each call, as inside a "
        "model (bench.cold_weights); false: warm, as it finds them after its previous call",
    )
    interleave_max_bytes: int | None = Field(
        None, ge=0, description="memory for one interleaved group (memory guard estimate); None: a quarter of RAM"
    )
    disturbance_step: float = Field(
        0.05, ge=0, description="relative change of the host's speed between thirds of a measurement that disturbs it"
    )
    min_cpu_share: float = Field(
        0.8, ge=0, description="process CPU time over wall time below which a measurement is disturbed"
    )
    max_other_cores: float = Field(
        0.25,
        ge=0,
        description="other processes' CPU use (cores, from /proc/stat) beyond the cores a benchmark's threads leave "
        "free of the host's that disturbs a measurement",
    )
    disturbance_retries: int = Field(1, ge=0, description="times a disturbed measurement is taken again")
    remeasure_share: float = Field(
        1.0,
        ge=0,
        allow_inf_nan=False,  # stored with every record, as strict JSON: a large share measures every one again
        description="re-measures of disturbed measurements may spend this share of the first measurements' time, "
        "besides remeasure_reserve_s (benanza.bench.remeasure); the rest stay disturbed, marked",
    )
    remeasure_reserve_s: float = Field(
        60.0,
        ge=0,
        allow_inf_nan=False,
        description="seconds re-measures may spend before the first measurements earned any",
    )
    reference_call: bool = Field(
        True, description="sample the host's reference call in every interleaved group (benanza.bench.reference)"
    )
    reference_step: float = Field(
        0.10,
        ge=0,
        description="relative slow-down of an interleaved group's reference call over the run's, beyond the noise "
        "of both, that marks the group as measured in a slow period of the host",
    )
    interleave_max_sessions: int = Field(
        1024,
        ge=1,
        description="live runtime sessions in one interleaved group (a benchmark with kernel times holds two)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.min_samples > self.max_samples:
            raise ValueError(f"min_samples {self.min_samples} > max_samples {self.max_samples}")
        if self.min_time_s > self.max_time_s:
            raise ValueError(f"min_time_s {self.min_time_s} > max_time_s {self.max_time_s}")
        return self


class HarnessFromEnv(HarnessSettings):
    """``BENANZA_HARNESS_*`` alone: each field checked, but not against the others, since a fleet
    file or a flag may still change those (``Settings.harness_settings`` checks the result)."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        return self


class Settings(BaseSettings):
    """Every ``BENANZA_*`` variable, validated (see the module docstring); frozen and picklable."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="_",
        env_nested_max_split=1,  # BENANZA_HARNESS_MAX_TIME_S -> harness.max_time_s, not harness.max.time_s
        env_ignore_empty=True,
        extra="ignore",  # BENANZA_TEST_MONGODB_URI, the deploy files' BENANZA_MONGO_USER, ...
        frozen=True,
    )

    system: str | None = Field(None, description="this machine's system name; None: the host name")
    # never in repr: a URI may hold a password (benanza shows URIs masked, store.uri.mask_uri)
    db: str | None = Field(None, repr=False, description="the database URI when none is given on the command line")
    db_file: str | None = Field(None, description="a file that holds the database URI")
    keep_repeats: int = Field(DEFAULT_KEEP_REPEATS, ge=0, description="earlier runs kept per benchmark identity")
    db_retry_window_s: float = Field(DEFAULT_RETRY_WINDOW_S, ge=0, description="MongoDB: the last retry starts by then")
    spill_dir: str | None = Field(None, description="fleet workers' spill folder; None: ./benanza-spill")
    supervise: bool = Field(
        True, description="run a command in a child process whose crashes in native code it survives (supervisor)"
    )
    harness: HarnessFromEnv = Field(
        default_factory=HarnessFromEnv, description="BENANZA_HARNESS_* (only the fields set count as set)"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        environ = _ENVIRON.get()
        return (init_settings, env_settings if environ is None else _MappingSource(settings_cls, environ))

    def system_name(self) -> str:
        """``BENANZA_SYSTEM``, or this machine's host name: the name its results are stored under."""
        return self.system or socket.gethostname()

    def spill_path(self) -> Path:
        """``BENANZA_SPILL_DIR``, or ``benanza-spill`` in the working directory (absolute)."""
        return Path(self.spill_dir or DEFAULT_SPILL_DIR).absolute()

    def harness_settings(self, base: Mapping[str, Any] | None = None, **overrides: Any) -> HarnessSettings:
        """``HarnessSettings``: defaults < ``base`` (a fleet file's ``[harness]``) < ``BENANZA_HARNESS_*`` <
        ``overrides`` (command-line flags, keyword arguments).

        Raises:
            UsageError: the combination does not validate.
        """
        from_env = self.harness.model_dump(include=self.harness.model_fields_set)
        return harness_settings({**(base or {}), **from_env, **overrides})


class _MappingSource(EnvSettingsSource):
    """The environment source, reading a given mapping instead of ``os.environ`` (tests, ``load_settings``)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {
            (name if self.case_sensitive else name.lower()): value
            for name, value in self._environ.items()
            if not (self.env_ignore_empty and value == "")
        }


_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("benanza_settings_environ", default=None)


@contextmanager
def _reading(environ: Mapping[str, str] | None) -> Iterator[None]:
    token = _ENVIRON.set(environ)
    try:
        yield
    finally:
        _ENVIRON.reset(token)


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings that ``environ`` (default: this process's environment) gives.

    Raises:
        UsageError: a variable does not validate; the message names it and says why.
    """
    try:
        with _reading(environ):
            return Settings()
    except ValidationError as exc:
        raise UsageError("; ".join(_env_problem(error) for error in exc.errors())) from None


def default_settings() -> Settings:
    """The settings of an empty environment: every default."""
    return load_settings({})


def harness_settings(values: Mapping[str, Any]) -> HarnessSettings:
    """``HarnessSettings`` from field values (strings are parsed).

    Raises:
        UsageError: a value does not validate; the message names the field.
    """
    try:
        return HarnessSettings.model_validate(dict(values))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
        raise UsageError(f"invalid harness settings: {problems}") from None


def _env_problem(error: Any) -> str:
    """One validation error as ``VARIABLE: reason, got 'value'``."""
    loc = [str(part) for part in error["loc"]]
    if loc[:1] == ["harness"]:
        variable = HARNESS_ENV_PREFIX + ("_".join(loc[1:2]).upper() or "*")
    else:
        variable = ENV_PREFIX + "_".join(loc[:1]).upper()
    got = error.get("input")
    shown = f", got {got!r}" if isinstance(got, str) else ""
    return f"{variable}: {error['msg']}{shown}"
