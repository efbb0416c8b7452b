"""Fingerprints of the machine (system) and of the software stack a result was measured on.

The system fingerprint describes the hardware for people and reports; the system's *name*
(``Settings.system_name``: ``BENANZA_SYSTEM`` or the host name) is what results are keyed
by. The stack fingerprint lists the versions that can change a measurement; its ``stack_id``
is part of every result's identity, so a new library or driver version is a new stack and
everything is measured again for it while the history stays.

ONNX and ONNX Runtime versions come from package metadata, not from importing the packages,
so the fingerprint is the same whether or not a runtime was already imported, and cheap
(a few milliseconds once NumPy, which benanza needs anyway, is imported).
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import importlib.util
import os
import platform
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from benanza.bench.contract import Runtime
from benanza.host_memory import memory_bytes
from benanza.model.keys import stable_id

# Import name -> distributions that provide it, the canonical one first.
_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "onnx": ("onnx", "onnx-weekly"),
    "onnxruntime": (
        "onnxruntime",
        "onnxruntime-gpu",
        "onnxruntime-openvino",
        "onnxruntime-directml",
        "onnxruntime-training",
        "ort-nightly",
        "ort-nightly-gpu",
    ),
}


SYSTEM_FIELDS = ("cpu_model", "logical_cores", "physical_cores", "memory_bytes", "os", "machine", "host")
DEVICE_PREFIX = "gpu_"  # a device runtime's keys (``Runtime.system()``: gpu_name, gpu_uuid, ...)


@dataclass(frozen=True, slots=True)
class SystemFingerprint:
    """The hardware of a system, as registered in the store (``to_doc``) and read back (``from_doc``).

    The stored document is flat: the devices' ``gpu_*`` keys, then the host's fields, then
    ``config`` (a fleet worker's system entry) and whatever else a document holds (``extra``: a
    hand-written entry's ``gpus`` list, ...). Values are never formatted.
    """

    cpu_model: str | None = None
    logical_cores: int | None = None
    physical_cores: int | None = None
    memory_bytes: int | None = None
    os: str | None = None
    machine: str | None = None
    host: str | None = None
    devices: Mapping[str, Any] = field(default_factory=dict)  # gpu_* keys of the devices its runtimes drive
    config: Mapping[str, Any] | None = None  # the fleet config's entry of the system, where a worker registered it
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_doc(self) -> dict[str, Any]:
        """The stored document (the shape every store has held: devices, host fields, config, the rest)."""
        doc = {**self.devices, **{name: getattr(self, name) for name in SYSTEM_FIELDS}}
        if self.config is not None:
            doc["config"] = dict(self.config)
        return doc | dict(self.extra)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None) -> SystemFingerprint:
        """A stored document (any written so far; missing fields are None)."""
        doc = doc or {}
        config = doc.get("config")
        known = {*SYSTEM_FIELDS, "config"} if isinstance(config, Mapping) else set(SYSTEM_FIELDS)
        return cls(
            **{name: doc.get(name) for name in SYSTEM_FIELDS},
            devices={k: v for k, v in doc.items() if k.startswith(DEVICE_PREFIX)},
            config=config if isinstance(config, Mapping) else None,
            extra={k: v for k, v in doc.items() if k not in known and not k.startswith(DEVICE_PREFIX)},
        )

    def with_config(self, config: Mapping[str, Any]) -> SystemFingerprint:
        """This fingerprint with the fleet config's entry of the system."""
        return replace(self, config=dict(config))

    def gpu_names(self) -> list[str]:
        """GPU models: the device runtime's ``gpu_name``, or a hand-written entry's ``gpus`` list.

        ``gpus`` holds names, or documents with ``name``.
        """
        gpus = self.extra.get("gpus")
        if isinstance(gpus, list):
            names = [g.get("name") if isinstance(g, Mapping) else g for g in gpus]
            return [str(n) for n in names if n]
        single = self.devices.get("gpu_name")
        return [str(single)] if isinstance(single, str) and single else []

    def price_per_hour(self) -> float | None:
        """``config.price_per_hour``, where the fleet config set one."""
        price = (self.config or {}).get("price_per_hour")
        return float(price) if isinstance(price, int | float) and not isinstance(price, bool) else None


@dataclass(frozen=True, slots=True)
class StackFingerprint:
    """The software a measurement depends on; its ``stack_id`` is part of every result's identity.

    The stored document is flat: ``python``, ``numpy``, the packages' versions (``onnx``,
    ``onnxruntime``), then ``runtime`` and the runtime's own parts (``Runtime.stack()``:
    providers, CUDA and cuDNN versions...). A part that names a package (ONNX Runtime reports
    its own version) is that package's version, in its place.
    """

    python: Mapping[str, Any]
    numpy: Mapping[str, Any] | None
    packages: Mapping[str, Any] = field(default_factory=dict)  # usually version strings
    runtime: str | None = None
    parts: Mapping[str, Any] = field(default_factory=dict)

    def to_doc(self) -> dict[str, Any]:
        """The stored document, keys in the order every store has held them."""
        doc: dict[str, Any] = {"python": dict(self.python), "numpy": copy.deepcopy(self.numpy), **self.packages}
        if self.runtime is not None:
            doc["runtime"] = self.runtime
        return doc | copy.deepcopy(dict(self.parts))

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> StackFingerprint:
        """A stored document (or ``stack_fingerprint``'s), any written so far."""
        base = {"python", "numpy", "runtime", *_DISTRIBUTIONS}
        return cls(
            python=dict(doc.get("python") or {}),
            numpy=copy.deepcopy(doc.get("numpy")),
            packages={k: doc[k] for k in _DISTRIBUTIONS if k in doc},
            runtime=doc.get("runtime"),
            parts={k: copy.deepcopy(v) for k, v in doc.items() if k not in base},
        )

    @property
    def stack_id(self) -> str:
        """The stable 16-hex-digit id of this stack (``stack_id``)."""
        return stack_id(self)


def system_fingerprint(runtimes: Iterable[Runtime] = ()) -> SystemFingerprint:
    """CPU model, cores, memory, OS and host of this machine (values, never formatted).

    Args:
        runtimes: the runtimes the system measures with; one that drives a device (the GPU
            runtime's ``system()``) adds that device's ``gpu_*`` keys (name, UUID, memory,
            compute capability), at the top level beside the CPU's. Every path that
            registers a system (``benanza run``, the fleet's workers) calls this.
    """
    cpuinfo = _read_cpuinfo()
    devices: dict[str, Any] = {}
    for runtime in runtimes:
        devices.update(runtime.system())
    host = {
        "cpu_model": _cpu_model(cpuinfo),
        "logical_cores": os.cpu_count(),
        "physical_cores": _physical_cores(cpuinfo),
        "memory_bytes": memory_bytes(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "host": socket.gethostname(),
    }
    return SystemFingerprint.from_doc(devices | host)


def stack_fingerprint(extra: Mapping[str, Any] | None = None) -> StackFingerprint:
    """Python, NumPy (with its BLAS), ONNX and ONNX Runtime versions, plus ``extra``.

    Args:
        extra: ``runtime`` (its registered name) and the runtime's own parts (``Runtime.stack()``:
            providers, CUDA/cuDNN versions); a key in ``extra`` replaces the same key of the base.
    """
    stack: dict[str, Any] = {
        "python": {"implementation": platform.python_implementation(), "version": platform.python_version()},
        "numpy": copy.deepcopy(_numpy()),
    }
    for module in _DISTRIBUTIONS:
        version = package_version(module)
        if version is not None:
            stack[module] = version
    stack.update(extra or {})
    return StackFingerprint.from_doc(stack)


def stack_id(stack: StackFingerprint | Mapping[str, Any]) -> str:
    """The stable 16-hex-digit id of a stack fingerprint, or of its stored document."""
    return stable_id(stack.to_doc() if isinstance(stack, StackFingerprint) else stack)


def package_version(module: str) -> str | None:
    """The installed version of an importable module, or None when it is not importable.

    A module provided by a non-canonical distribution (``onnxruntime-gpu``) gets the
    distribution's name appended, since its build differs: ``"1.20.1 (onnxruntime-gpu)"``.
    """
    if importlib.util.find_spec(module) is None:
        return None
    candidates = _DISTRIBUTIONS.get(module, (module,))
    for dist in candidates:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        return version if dist == candidates[0] else f"{version} ({dist})"
    return "unknown"


@functools.cache
def _numpy() -> dict[str, Any] | None:
    # The BLAS needs numpy imported; benanza imports it anyway, and the answer is per process.
    try:
        import numpy
    except ImportError:
        return None
    info: dict[str, Any] = {"version": numpy.__version__, "blas": None}
    try:
        config = numpy.show_config(mode="dicts")
    except (TypeError, ValueError, AttributeError):  # numpy < 1.26 only prints
        return info
    blas = ((config or {}).get("Build Dependencies") or {}).get("blas") or {}
    if blas:
        info["blas"] = {"name": blas.get("name"), "version": blas.get("version")}
    return info


def _read_cpuinfo() -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per logical processor (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    processors = []
    for block in text.split("\n\n"):
        entry = {}
        for line in block.splitlines():
            name, sep, value = line.partition(":")
            if sep:
                entry[name.strip()] = value.strip()
        if entry:
            processors.append(entry)
    return processors


def _cpu_model(cpuinfo: list[dict[str, str]]) -> str:
    for entry in cpuinfo:
        for name in ("model name", "Model", "Hardware", "cpu model"):
            if entry.get(name):
                return entry[name]
    return platform.processor() or platform.machine()


def _physical_cores(cpuinfo: list[dict[str, str]]) -> int | None:
    cores = {(e.get("physical id", "0"), e["core id"]) for e in cpuinfo if "core id" in e}
    return len(cores) or None
