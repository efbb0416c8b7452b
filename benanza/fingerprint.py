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
from collections.abc import Iterable
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


def system_fingerprint(runtimes: Iterable[Runtime] = ()) -> dict[str, Any]:
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
    return devices | {
        "cpu_model": _cpu_model(cpuinfo),
        "logical_cores": os.cpu_count(),
        "physical_cores": _physical_cores(cpuinfo),
        "memory_bytes": memory_bytes(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "host": socket.gethostname(),
    }


def stack_fingerprint(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Python, NumPy (with its BLAS), ONNX and ONNX Runtime versions, plus ``extra``.

    Args:
        extra: a runtime's own parts (``Runtime.stack()``: providers, CUDA/cuDNN versions);
            a key in ``extra`` replaces the same key of the base fingerprint.
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
    return stack


def stack_id(stack: dict[str, Any]) -> str:
    """The stable 16-hex-digit id of a stack fingerprint."""
    return stable_id(stack)


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
        for field in ("model name", "Model", "Hardware", "cpu model"):
            if entry.get(field):
                return entry[field]
    return platform.processor() or platform.machine()


def _physical_cores(cpuinfo: list[dict[str, str]]) -> int | None:
    cores = {(e.get("physical id", "0"), e["core id"]) for e in cpuinfo if "core id" in e}
    return len(cores) or None
