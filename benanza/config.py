"""Fleet configuration: which systems to benchmark, what to measure, where Ray and the database are.

A fleet is described by a TOML file (``configs/*.toml``) validated by pydantic models with
``extra="forbid"``, so a misspelt key is an error, never silently ignored::

    name = "nightly"
    include = ["systems/gpus.toml", "systems/cpus.toml"]   # catalogs of [[systems]]
    use = ["t4", "h100"]                                     # picked from the catalogs by name
    batch_sizes = [1, 8]
    db = "${BENANZA_DB:-sqlite:///benanza-fleet.db}"

    [[systems]]                                              # inline systems join the used ones
    name = "cpu-2t"
    threads = 2

    [ray]
    address = "auto"

    [harness]                                                # HarnessSettings overrides
    max_time_s = 1.0

Paths in a file (``include``, ``models``) are relative to that file's folder; ``zoo:NAME``
names a model of the zoo that ships in the onnx wheel. ``db`` and ``ray.address`` may hold
``${VAR}`` or ``${VAR:-default}``, expanded from the environment at load time; where ``VAR``
is unset, a variable ``VAR_FILE`` names a file that holds the value (a mounted secret:
``${BENANZA_DB}`` reads ``$BENANZA_DB_FILE``). A ``db`` left out means ``$BENANZA_DB`` (or
``$BENANZA_DB_FILE``) or the SQLite default. ``db`` is held as a ``StoreURI``, so a config
printed or dumped to JSON shows its password masked. Precedence is the house rule: command-line
flags (``FleetConfig.with_overrides``) over the environment over the file over defaults.

Every problem with a file is a ``ConfigError`` whose one-line message names the file, the
location in it and the reason (``configs/x.toml: systems[1].threads: should be a positive
integer or 'auto', got 0``).

A system is pinned in Ray by the label ``system=NAME`` and/or the custom resource
``system:NAME`` (``SystemConfig.placement``); ``cluster/`` and ``deploy/`` give each node
exactly these, and tests check that they agree with ``configs/systems/*.toml``.
"""

from __future__ import annotations

import functools
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from benanza.bench.host_cpu import AUTO, is_threads_setting
from benanza.errors import BenanzaError, ConfigError, RegistryError, UsageError
from benanza.model.given_inputs import parse_input_flag, parse_input_flags, split_input_flag
from benanza.model.request import BindingRequest, parse_shape_override, parse_shape_overrides
from benanza.settings import HarnessSettings, Settings, load_settings
from benanza.store.uri import StoreURI, mask_uri

SYSTEM_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
SYSTEM_LABEL = "system"  # Ray node label key: system=NAME
RESOURCE_PREFIX = "system:"  # Ray custom resource: system:NAME
ZOO_PREFIX = "zoo:"
DEFAULTS_SOURCE = "<embedded defaults>"
# The main job's defaults, the same for `benanza run` and `benanza fleet run` with no config: DLBricks
# sequences of 1 and 3 layers (the composition's G = 1 and a fused neighbourhood), a shorter time cap
# than the harness's own, so the zoo takes minutes on a laptop, and the threads the other processes
# leave free (a laptop or CI runner is rarely idle, and threads that a neighbour competes with skew
# every composition: see host_cpu.free_cores).
MAIN_JOB_GRANULARITIES = (1, 3)
MAIN_JOB_THREADS = AUTO
MAIN_JOB_HARNESS: Mapping[str, float] = {"min_time_s": 0.02, "max_time_s": 0.5}

_ENV_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


# --- field-level helpers -------------------------------------------------------------------


def _environ(info: ValidationInfo) -> Mapping[str, str]:
    context = info.context or {}
    return context.get("environ", os.environ)


def _expand_env(value: Any, info: ValidationInfo) -> Any:
    """``${VAR}`` / ``${VAR:-default}`` in a string, from the load's environment."""
    if not isinstance(value, str) or "${" not in value:
        return value
    environ = _environ(info)

    def substitute(match: re.Match[str]) -> str:
        name, default = match["name"], match["default"]
        found = environ.get(name) or _value_from_file(name, environ)
        if found:
            return found
        if default is not None:
            return default
        raise ValueError(f"environment variable {name} is not set or empty (write ${{{name}:-default}} for a fallback)")

    expanded = _ENV_REF.sub(substitute, value)
    if "${" in expanded:
        raise ValueError(f"malformed ${{...}} reference in {mask_uri(value)!r}")
    return expanded or None


def _value_from_file(name: str, environ: Mapping[str, str]) -> str | None:
    """The content of the file ``$NAME_FILE`` names (whitespace stripped), or None when it is unset."""
    path = environ.get(f"{name}_FILE")
    if not path:
        return None
    try:
        return Path(path).expanduser().read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise ValueError(f"{name}_FILE={path}: cannot read it: {reason}") from None


def _resolve_model_path(value: Any, info: ValidationInfo) -> Any:
    """``zoo:NAME`` -> the zoo file; a relative path -> relative to the config file's folder."""
    if not isinstance(value, str | os.PathLike):
        return value  # the Path validator reports the type
    text = os.fspath(value)
    if text.startswith(ZOO_PREFIX):
        from benanza.model.zoo import zoo_dir

        name = text.removeprefix(ZOO_PREFIX)
        path = zoo_dir() / f"light_{name}.onnx"
        if not path.is_file():
            known = sorted(p.stem.removeprefix("light_") for p in zoo_dir().glob("light_*.onnx"))
            raise ValueError(f"unknown zoo model {name!r}; known: {', '.join(known) or 'none'}")
        return path
    path = Path(text).expanduser()
    base = (info.context or {}).get("base_dir")
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    path = path.resolve()
    if not path.exists():
        raise ValueError(f"no such model file or folder: {path}")
    return path


def _resolve_input_text(value: Any, info: ValidationInfo) -> Any:
    """``[NAME=]FILE`` (``--input``'s) with a relative file made relative to the config file's folder, the file
    read to check it (``given_inputs.parse_input_flag``)."""
    if not isinstance(value, str):
        return value  # the str validator reports the type
    name, file = split_input_flag(value)
    path = Path(file).expanduser()
    base = (info.context or {}).get("base_dir")
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    text = f"{name}={path.resolve()}" if name else str(path.resolve())
    try:
        parse_input_flag(text)
    except UsageError as exc:
        raise ValueError(str(exc)) from None
    return text


def _check_shape(text: str) -> str:
    try:
        parse_shape_override(text)
    except UsageError:
        raise ValueError(f"expected NAME=DIMS (e.g. images=1x3x224x224), got {text!r}") from None
    return text


def _check_dtype(name: str) -> str:
    known = _dtype_names()
    if name not in known:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(sorted(known))}")
    return name


@functools.cache
def _dtype_names() -> frozenset[str]:
    import onnx

    from benanza.model.dtypes import dtype_name

    skip = {onnx.TensorProto.UNDEFINED, onnx.TensorProto.STRING}  # no tensors to benchmark
    return frozenset(dtype_name(t) for t in onnx.TensorProto.DataType.values() if t not in skip)


PositiveInt = Annotated[int, Field(gt=0)]
EnvStr = Annotated[str | None, BeforeValidator(_expand_env)]
EnvStoreURI = Annotated[StoreURI | None, BeforeValidator(_expand_env)]
ModelPath = Annotated[Path, BeforeValidator(_resolve_model_path)]
ShapeText = Annotated[str, AfterValidator(_check_shape)]
InputText = Annotated[str, BeforeValidator(_resolve_input_text)]
DtypeName = Annotated[str, AfterValidator(_check_dtype)]


# --- runtime options per runtime (a registry: a new runtime registers how a system configures it)


SystemOptions = Callable[["SystemConfig"], dict[str, Any]]
_RUNTIME_OPTIONS: dict[str, SystemOptions] = {}


def register_runtime_options(runtime: str) -> Callable[[SystemOptions], SystemOptions]:
    """Register how a system's settings become keyword options of ``get_runtime(runtime, ...)``."""

    def decorate(build: SystemOptions) -> SystemOptions:
        _RUNTIME_OPTIONS[runtime] = build
        return build

    return decorate


@register_runtime_options("onnxruntime")
def _onnxruntime_options(system: SystemConfig) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if system.kind == "gpu":  # ONNX Runtime on a GPU system is the framework on that GPU
        options["ep"] = "cuda"
    if system.threads is not None:
        options["threads"] = system.threads
    if system.opt_level is not None:
        options["opt_level"] = system.opt_level
    return options


def _option_value(text: str) -> Any:
    """An entry option's value: true/false as booleans, whole numbers as ints, else the text."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        return text.strip()


def runtime_entry(entry: str) -> tuple[str, dict[str, Any]]:
    """A system's runtime entry as (runtime name, options): ``cudnn:precision=float16,tensor_cores=false``.

    An entry is a runtime's registered name, optionally followed by ``:`` and comma-separated
    ``option=value`` pairs that override the system's settings for that runtime; one runtime
    may appear with several option sets (each is a variant measured on the same stack).

    Raises:
        ValueError: a malformed entry (the message says what is wrong).
    """
    name, sep, rest = entry.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"runtime entry {entry!r} names no runtime")
    options: dict[str, Any] = {}
    if sep:
        for pair in rest.split(","):
            key, eq, value = pair.partition("=")
            if not eq or not key.strip() or not value.strip():
                raise ValueError(f"runtime entry {entry!r}: {pair!r} is not option=value")
            if key.strip() in options:
                raise ValueError(f"runtime entry {entry!r} sets {key.strip()} twice")
            options[key.strip()] = _option_value(value)
    return name, options


# --- models --------------------------------------------------------------------------------


class SystemConfig(BaseModel):
    """One system of the fleet: a kind of machine (and device) that results are keyed by.

    CPU systems differ by machine and thread setting (``cpu-2t``), GPU systems by GPU model.
    The driver starts one actor per CPU system and one per GPU (``devices``) of a GPU system,
    each pinned to a node of this system by ``placement``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=SYSTEM_NAME_PATTERN, description="results are keyed by it; Ray label value")
    kind: Literal["cpu", "gpu"] = "cpu"
    runtimes: list[str] = Field(
        default_factory=lambda: ["onnxruntime"],
        min_length=1,
        description='runtime entries: "cudnn", or with options "cudnn:precision=float16,tensor_cores=false"',
    )
    threads: int | str | None = Field(
        None,
        description="CPU intra-op threads: a number, or 'auto' (the cores other processes leave free when the "
        "system's worker starts); default: all cores, and 'auto' in the embedded defaults (the main job)",
    )
    opt_level: str | None = Field(None, description="ONNX Runtime graph optimisation level")
    devices: list[Annotated[int, Field(ge=0)]] | None = Field(None, min_length=1, description="GPU ordinals; None=all")
    gpu: str | None = Field(None, description="expected GPU model, e.g. H100 (checked against the device name)")
    price_per_hour: float | None = Field(None, ge=0, description="USD per hour of one device of this system")
    placement: Literal["label", "resource", "both"] = "both"
    num_cpus: float = Field(1, ge=0, description="CPUs each actor of this system reserves in Ray")
    simulate_cpus: PositiveInt | None = Field(None, description="num_cpus of this system's simulated local node")
    description: str | None = None

    @field_validator("threads", mode="before")
    @classmethod
    def _threads(cls, value: Any) -> int | str | None:
        if value is None or is_threads_setting(value):
            return value
        raise ValueError(f"should be a positive integer or 'auto', got {value!r}")

    @field_validator("name")
    @classmethod
    def _label_value(cls, name: str) -> str:
        if not name[-1].isalnum():  # Ray and Kubernetes label values end alphanumeric
            raise ValueError(f"system name {name!r} must end with a letter or digit")
        return name

    @field_validator("runtimes")
    @classmethod
    def _unique_runtimes(cls, runtimes: list[str]) -> list[str]:
        from benanza.runtimes.base import get_runtime  # registers the built-in runtimes (no GPU library)

        seen: set[tuple[str, tuple[tuple[str, Any], ...]]] = set()
        for entry in runtimes:
            name, options = runtime_entry(entry)
            key = (name, tuple(sorted(options.items())))
            if key in seen:
                raise ValueError(f"runtimes listed twice in {runtimes}")
            seen.add(key)
            if options:  # an option the runtime does not take is refused here, not in a worker
                try:
                    get_runtime(name, **options)
                except BenanzaError as exc:
                    raise ValueError(str(exc)) from None
        return runtimes

    def runtime_names(self) -> list[str]:
        """The runtimes this system uses, by registered name (an entry's options left out)."""
        return list(dict.fromkeys(runtime_entry(entry)[0] for entry in self.runtimes))

    @field_validator("devices")
    @classmethod
    def _unique_devices(cls, devices: list[int] | None) -> list[int] | None:
        if devices is not None and len(set(devices)) != len(devices):
            raise ValueError(f"devices listed twice in {devices}")
        return devices

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.kind == "cpu":
            for field in ("devices", "gpu"):
                if getattr(self, field) is not None:
                    raise ValueError(f"{field} is for gpu systems; {self.name!r} is kind cpu")
        if self.opt_level is not None:
            if "onnxruntime" not in self.runtime_names():
                raise ValueError("opt_level is an onnxruntime option, but runtimes does not list onnxruntime")
            from benanza.runtimes.onnxruntime import OPT_LEVELS

            if self.opt_level not in OPT_LEVELS:
                raise ValueError(f"unknown opt_level {self.opt_level!r}; known: {', '.join(OPT_LEVELS)}")
        if self.simulate_cpus is not None and self.num_cpus > self.simulate_cpus:
            raise ValueError(
                f"num_cpus {self.num_cpus:g} > simulate_cpus {self.simulate_cpus}: "
                "no actor of this system could be placed on its simulated node"
            )
        return self

    def label_selector(self) -> dict[str, str]:
        """The Ray node label that marks this system's nodes (and selects them for actors)."""
        return {SYSTEM_LABEL: self.name}

    def resource_name(self) -> str:
        """The Ray custom resource that this system's nodes carry."""
        return f"{RESOURCE_PREFIX}{self.name}"

    def runtime_options(self, entry: str) -> dict[str, Any]:
        """Keyword options for ``get_runtime(name, ...)`` of a runtime entry: the system's settings, then the entry's.

        Raises:
            UsageError: the system does not list ``entry``.
        """
        if entry not in self.runtimes:
            raise UsageError(f"system {self.name!r} does not use runtime {entry!r}; it uses {', '.join(self.runtimes)}")
        name, options = runtime_entry(entry)
        build = _RUNTIME_OPTIONS.get(name)
        return {**(build(self) if build else {}), **options}

    def simulated_node(self) -> dict[str, Any]:
        """Keyword arguments of ``ray.cluster_utils.Cluster.add_node`` for this system's local node."""
        return {
            "num_cpus": self.simulate_cpus if self.simulate_cpus is not None else max(1, math.ceil(self.num_cpus)),
            "resources": {self.resource_name(): 1},
            "labels": self.label_selector(),
        }


class RayConfig(BaseModel):
    """Where the Ray cluster is: in-process (default), an existing cluster, or simulated here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    address: EnvStr = Field(None, description='existing cluster: "auto", "HOST:6379" or "ray://HOST:10001"')
    local_cluster: bool = Field(False, description="start one simulated node per system on this machine")
    namespace: str = Field("benanza", min_length=1)
    dashboard: bool = False

    @model_validator(mode="after")
    def _one_cluster(self) -> Self:
        if self.address and self.local_cluster:
            raise ValueError("address and local_cluster exclude each other: connect to a cluster or simulate one")
        return self


class FleetConfig(BaseModel):
    """A fleet run: systems x models x batch sizes x dtypes, the database and the Ray cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field("default", min_length=1)
    systems: list[SystemConfig] = Field(min_length=1)
    models: list[ModelPath] = Field(default_factory=list, description="files or folders; empty = the onnx zoo")
    batch_sizes: list[PositiveInt] | None = Field(
        None, min_length=1, description="None = each model's own batch, 1 where its file leaves it free"
    )
    shapes: list[ShapeText] = Field(default_factory=list, description="NAME=DIMS input shape bindings")
    dims: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict, description="symbolic dimensions bound by name in every input (--dim NAME=N)"
    )
    values: dict[str, int] = Field(
        default_factory=dict, description="inputs that choose an If's branch, bound to a value (--value NAME=V)"
    )
    inputs: list[InputText] = Field(
        default_factory=list, description="inputs given their values from files, NAME=FILE.npy or FILE.npz (--input)"
    )
    granularities: list[PositiveInt] = Field(default_factory=list, description="DLBricks sequence sizes G")
    dtypes: list[DtypeName] = Field(default_factory=lambda: ["float32"], min_length=1)
    e2e: bool = True
    db: EnvStoreURI = Field(None, description="store URI; None = $BENANZA_DB, $BENANZA_DB_FILE or sqlite:///benanza.db")
    ray: RayConfig = Field(default_factory=RayConfig)
    harness: dict[str, Any] = Field(default_factory=dict, description="HarnessSettings overrides")
    chunk_size: PositiveInt = Field(32, description="benchmark specs per actor call")
    chunk_by_model: bool = Field(
        True,
        description="with the interleaved schedule, an actor call takes one model's benchmarks (up to "
        "interleave_max_sessions) instead of chunk_size, so its parts and its whole are sampled together",
    )
    lease_s: float = Field(
        15, gt=0, description="seconds a lease outlives its driver's last heartbeat (it beats every lease_s / 3)"
    )
    max_attempts: PositiveInt = Field(3, description="tries before a benchmark is stored as failed")

    _source: Path | None = PrivateAttr(None)

    @field_validator("systems")
    @classmethod
    def _unique_names(cls, systems: list[SystemConfig]) -> list[SystemConfig]:
        seen: set[str] = set()
        for system in systems:
            if system.name in seen:
                raise ValueError(f"duplicate system name {system.name!r}")
            seen.add(system.name)
        return systems

    @field_validator("harness")
    @classmethod
    def _valid_harness(cls, harness: dict[str, Any]) -> dict[str, Any]:
        try:
            HarnessSettings.model_validate(harness)
        except ValidationError as exc:
            raise ValueError(_first_problem(exc)) from None
        return harness

    @property
    def source(self) -> Path | None:
        """The file this config was loaded from (None for defaults or a config built in code)."""
        return self._source

    def system_names(self) -> list[str]:
        return [s.name for s in self.systems]

    def system(self, name: str) -> SystemConfig:
        """A system by name; an unknown name lists the known ones."""
        for system in self.systems:
            if system.name == name:
                return system
        raise RegistryError("system", name, self.system_names())

    def model_paths(self) -> list[Path]:
        """The corpus: ``models`` with folders expanded to their ``.onnx`` files, or the zoo."""
        from benanza.model.load import expand_model_paths
        from benanza.model.zoo import zoo_paths

        return expand_model_paths(list(self.models)) if self.models else zoo_paths()

    def batches(self) -> list[int | None]:
        """The batch sizes to plan each model at; ``[None]``: its own (``batch_sizes`` left out)."""
        return list(self.batch_sizes) if self.batch_sizes else [None]

    def binding_request(self) -> BindingRequest:
        """``shapes``, ``dims``, ``values`` and ``inputs`` as one request (what ``--shape``, ``--dim``, ``--value``
        and ``--input`` make).

        Raises:
            UsageError: an input's file can no longer be read, or the bindings contradict each other.
        """
        return BindingRequest(
            parse_shape_overrides(self.shapes), dict(self.dims), dict(self.values), parse_input_flags(self.inputs)
        )

    def harness_settings(self, settings: Settings, **overrides: Any) -> HarnessSettings:
        """``HarnessSettings``: defaults < this file < ``BENANZA_HARNESS_*`` (in ``settings``) < ``overrides`` (flags).

        Raises:
            UsageError: the combination does not validate.
        """
        return settings.harness_settings(self.harness, **overrides)

    def with_overrides(
        self,
        *,
        db: str | StoreURI | None = None,
        address: str | None = None,
        models: list[str | Path] | None = None,
        batch_sizes: list[int] | None = None,
        shapes: list[str] | None = None,
        dims: Mapping[str, int] | None = None,
        values: Mapping[str, int] | None = None,
        inputs: list[str] | None = None,
    ) -> FleetConfig:
        """This config with command-line values applied (None keeps the file's value).

        An ``address`` connects to that cluster, so it also switches ``ray.local_cluster`` off.
        Relative ``models`` are relative to the working directory, as on a command line.

        Raises:
            UsageError: an override does not validate.
        """
        data = self.model_dump()
        data["systems"] = list(self.systems)
        data["models"] = [str(p) for p in self.models]
        if db is not None:
            data["db"] = db
        if address is not None:
            data["ray"] = {**data["ray"], "address": address, "local_cluster": False}
        if models is not None:
            data["models"] = [os.fspath(m) for m in models]
        if batch_sizes is not None:
            data["batch_sizes"] = batch_sizes
        if shapes is not None:
            data["shapes"] = shapes
        if dims:
            data["dims"] = {**data["dims"], **dims}
        if values:
            data["values"] = {**data["values"], **values}
        if inputs is not None:
            data["inputs"] = inputs  # as --shape: the command line's replace the file's
        try:
            changed = FleetConfig.model_validate(data, context={"environ": {}})
        except ValidationError as exc:
            raise UsageError(f"invalid override: {_first_problem(exc)}") from None
        changed._source = self._source
        return changed


# --- loading -------------------------------------------------------------------------------


def load_fleet_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> FleetConfig:
    """Read and validate a fleet file, its ``include``d catalogs and ``use``d systems.

    Args:
        path: the TOML file.
        environ: where ``${VAR}`` references are looked up (default: ``os.environ``).

    Raises:
        ConfigError: the file (or an included one) is missing, not TOML, or does not
            validate; the message names the file and the first problem's location.
    """
    path = Path(path)
    environ = os.environ if environ is None else environ
    data = _read_toml(path)
    include = _string_list(data.pop("include", []), path, "include")
    use = _string_list(data.pop("use", []), path, "use")

    catalog: dict[str, SystemConfig] = {}
    origin: dict[str, Path] = {}
    for i, relative in enumerate(include):
        catalog_path = path.parent / relative
        if not catalog_path.is_file():
            raise ConfigError(path, f"include[{i}]: no such catalog file: {catalog_path}")
        for system in _read_catalog(catalog_path):
            if system.name in catalog:
                raise ConfigError(catalog_path, f"system {system.name!r} is already defined in {origin[system.name]}")
            catalog[system.name] = system
            origin[system.name] = catalog_path

    used = []
    for i, name in enumerate(use):
        if name not in catalog:
            known = ", ".join(sorted(catalog)) or "none (no catalog is included)"
            raise ConfigError(path, f"use[{i}]: unknown system {name!r}; known: {known}")
        used.append(catalog[name])

    inline = data.get("systems", [])
    if not isinstance(inline, list):
        raise ConfigError(path, "systems: expected [[systems]] tables")
    if not inline and not used:
        raise ConfigError(
            path, "systems: no system; add [[systems]] tables, or include a catalog and `use` its systems"
        )
    # Inline systems first, so that error locations (systems[1]) match the file's tables.
    data["systems"] = [*inline, *used]
    try:
        config = FleetConfig.model_validate(data, context={"base_dir": path.parent, "environ": environ})
    except ValidationError as exc:
        raise ConfigError(path, _first_problem(exc)) from None
    config._source = path
    return config


def default_fleet_config(settings: Settings | None = None) -> FleetConfig:
    """The embedded defaults: this machine as the only (CPU) system, in-process Ray, default DB, the zoo.

    The DLBricks granularities and harness settings are the main job's, as `benanza run` uses them.

    Args:
        settings: the ``BENANZA_*`` settings that name this machine (``BENANZA_SYSTEM``); None reads this
            process's environment (``load_settings``), as a public entry point does.
    """
    name = (settings if settings is not None else load_settings()).system_name()
    try:
        return FleetConfig(
            systems=[SystemConfig(name=name, threads=MAIN_JOB_THREADS)],
            granularities=list(MAIN_JOB_GRANULARITIES),
            harness=dict(MAIN_JOB_HARNESS),
        )
    except ValidationError as exc:
        raise ConfigError(
            DEFAULTS_SOURCE, f"{_first_problem(exc)}: set BENANZA_SYSTEM to a valid system name"
        ) from None


def load_catalog(path: str | os.PathLike[str]) -> list[SystemConfig]:
    """The systems of a catalog file (``configs/systems/*.toml``: only ``[[systems]]`` tables)."""
    return _read_catalog(Path(path))


def _read_catalog(path: Path) -> list[SystemConfig]:
    data = _read_toml(path)
    extra = sorted(set(data) - {"systems"})
    if extra:
        raise ConfigError(path, f"a catalog holds only [[systems]] tables; found {extra[0]!r}")
    entries = data.get("systems", [])
    if not isinstance(entries, list):
        raise ConfigError(path, "systems: expected [[systems]] tables")
    try:
        systems = TypeAdapter(list[SystemConfig]).validate_python(entries)
    except ValidationError as exc:
        raise ConfigError(path, _first_problem(exc, prefix=("systems",))) from None
    seen: set[str] = set()
    for i, system in enumerate(systems):
        if system.name in seen:
            raise ConfigError(path, f"systems[{i}].name: duplicate system name {system.name!r}")
        seen.add(system.name)
    return systems


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(path, "no such file") from None
    except IsADirectoryError:
        raise ConfigError(path, "is a folder, not a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, f"invalid TOML: {_single_line(str(exc))}") from None
    except UnicodeDecodeError:
        raise ConfigError(path, "not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(path, f"cannot read: {exc.strerror or exc}") from None


def _string_list(value: Any, path: Path, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(path, f"{key}: expected a list of strings, got {value!r}")
    return value


def _first_problem(exc: ValidationError, prefix: tuple[str | int, ...] = ()) -> str:
    """``loc: message`` of the first error (``systems[1].threads: ...``), plus how many more."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = _location((*prefix, *first["loc"]))
    message = first["msg"].removeprefix("Value error, ")
    value = first.get("input")
    if first["type"] not in {"value_error", "missing", "extra_forbidden"} and isinstance(
        value, str | int | float | bool
    ):
        shown = repr(value)
        message += f", got {shown if len(shown) <= 60 else shown[:57] + '...'}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return _single_line(f"{where}: {message}{more}" if where else f"{message}{more}")


def _location(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _single_line(text: str) -> str:
    return " ".join(text.split())
