"""The GPU software stack and the GPU of the system: the fingerprints GPU results are keyed by.

``gpu_stack`` extends the CPU stack fingerprint (``benanza.fingerprint``) with everything that
can change a GPU measurement: the driver, the CUDA driver and runtime, cuDNN, cuBLAS and
cublasLt, the Python bindings that call them (cuDNN frontend, nvmath-python, CuPy) and the
device model with its clocks limits. A new driver or library version changes the dict, so
its ``stack_id``, and everything is measured again for it. The board's identity (UUID, PCI
bus id) is hardware, not software: it is in ``gpu_system`` instead.

Values are plain data (numbers, version strings, lists): never formatted with units.

The parsers of the libraries' encoded version numbers and of NVML's enumerations are pure and
carry most of the tests. Nothing GPU-related is imported at import time: CuPy, NVML
(``nvidia-ml-py``), the cuDNN frontend and nvmath are imported inside the functions, and their
absence (or the absence of a device) is a one-line ``GpuError`` saying what is missing.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from collections.abc import Callable, Iterator
from typing import Any

from benanza.errors import GpuError, one_line

INSTALL_HINT = "pip install 'benanza[gpu]'"

# nvmlDeviceArchitecture_t (nvml.h; the NVML_DEVICE_ARCH_* constants of nvidia-ml-py).
# 11, 12 and 15 are not discrete GPUs (Orin / DLA / NPU) and nvml.h and nvidia-ml-py name
# them differently, so they decode as unknown rather than under a guessed name.
ARCHITECTURES: dict[int, str] = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}
ARCH_UNKNOWN = 0xFFFFFFFF

# nvmlClocksEventReason* bits (nvml.h; nvidia-ml-py's nvmlClocksEventReason* constants). The two
# highest are only named as nvmlClocksThrottleReason* but can be set in the same mask.
CLOCKS_EVENT_REASONS: dict[int, str] = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
    0x200: "BoardLimit",
    0x400: "Reliability",
}
# Not throttling: an idle GPU is clocked down until work arrives, and application clocks are a
# setting someone chose (benanza never changes it), not a limit that varies during a run.
_NOT_THROTTLING = 0x1 | 0x2


# ---------------------------------------------------------------------------------------------
# Pure parsers
# ---------------------------------------------------------------------------------------------


def cuda_version(encoded: int) -> str:
    """``"major.minor"`` of a CUDA version as the driver and runtime APIs report it.

    CUDA encodes ``1000 * major + 10 * minor`` (``CUDA_VERSION``, ``cudaDriverGetVersion``,
    ``nvmlSystemGetCudaDriverVersion``): 12040 is 12.4. The patch level is not encoded.
    """
    value = _non_negative(encoded, "CUDA version")
    return f"{value // 1000}.{value % 1000 // 10}"


def cudnn_version_of(encoded: int) -> str:
    """``"major.minor.patch"`` of ``cudnnGetVersion()``.

    cuDNN 9 encodes ``10000 * major + 100 * minor + patch`` (90100 is 9.1.0; 91000 is 9.10.0);
    cuDNN 8 and older ``1000 * major + 100 * minor + patch`` (8907 is 8.9.7). The two ranges do
    not overlap: the old encoding stays below 10000, the new one starts at 90000.
    """
    value = _non_negative(encoded, "cuDNN version")
    major_unit = 10000 if value >= 10000 else 1000
    return f"{value // major_unit}.{value % major_unit // 100}.{value % 100}"


def cublas_version_of(encoded: int) -> str:
    """``"major.minor.patch"`` of ``cublasGetVersion`` / ``cublasLtGetVersion``.

    ``CUBLAS_VERSION`` is ``10000 * major + 100 * minor + patch`` since cuBLAS 11.9 (120304 is
    12.3.4); cuBLAS 11.8 and older used ``1000 * major`` (11605 is 11.6.5). Any cuBLAS 10 or
    later in the new encoding is at least 100000, any in the old one below it.
    """
    value = _non_negative(encoded, "cuBLAS version")
    major_unit = 10000 if value >= 100000 else 1000
    return f"{value // major_unit}.{value % major_unit // 100}.{value % 100}"


def architecture_name(value: int) -> str:
    """The name of an ``nvmlDeviceArchitecture_t`` (9 is ``"Hopper"``); ``"unknown-N"`` otherwise.

    An unknown value keeps its number, so two unknown architectures still differ in the stack.
    """
    if value == ARCH_UNKNOWN:
        return "unknown"
    return ARCHITECTURES.get(value, f"unknown-{value}")


def throttle_reason_names(mask: int) -> list[str]:
    """The names of the ``nvmlClocksEventReason`` bits set in ``mask``, lowest bit first.

    A bit NVML did not define when this was written is kept as its hex value (``"0x800"``),
    so a snapshot never silently drops a reason.
    """
    value = _non_negative(mask, "clocks event reasons")
    names = []
    bit = 1
    while bit <= value:
        if value & bit:
            names.append(CLOCKS_EVENT_REASONS.get(bit, hex(bit)))
        bit <<= 1
    return names


def throttled(mask: int) -> bool:
    """Whether the clocks were held below what the workload asked for (power, thermal, sync...).

    Idle and the applications-clocks setting are not throttling (see ``_NOT_THROTTLING``).
    """
    return bool(_non_negative(mask, "clocks event reasons") & ~_NOT_THROTTLING)


def _non_negative(value: int, what: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return number


# ---------------------------------------------------------------------------------------------
# The libraries: found lazily, missing ones are a one-line GpuError
# ---------------------------------------------------------------------------------------------


def require_cupy(ordinal: int = 0) -> Any:
    """The ``cupy`` module once CUDA device ``ordinal`` is known to be usable.

    Raises:
        GpuError: CuPy is not installed, no driver or device can be reached, or ``ordinal`` is
            not a visible device.
    """
    try:
        import cupy
    except ImportError as exc:
        raise GpuError(f"CuPy is not installed ({one_line(exc)}): {INSTALL_HINT}") from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except RuntimeError as exc:  # CUDARuntimeError: no driver, driver too old, no device
        raise GpuError(
            f"no usable CUDA device ({one_line(exc)}): needs an NVIDIA GPU, its driver, and {INSTALL_HINT}"
        ) from exc
    if count < 1:
        raise GpuError(f"no CUDA device is visible (CUDA_VISIBLE_DEVICES?); needs an NVIDIA GPU and {INSTALL_HINT}")
    if not 0 <= ordinal < count:
        raise GpuError(f"no CUDA device {ordinal}: {count} visible (ordinals 0 to {count - 1})")
    return cupy


def open_nvml() -> Any:
    """The ``pynvml`` module with NVML initialised (pair with ``pynvml.nvmlShutdown()``).

    Raises:
        GpuError: ``nvidia-ml-py`` is not installed or NVML cannot start (no driver).
    """
    try:
        import pynvml
    except ImportError as exc:
        raise GpuError(f"nvidia-ml-py (NVML) is not installed ({one_line(exc)}): {INSTALL_HINT}") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise GpuError(f"NVML cannot start ({one_line(exc)}): needs the NVIDIA driver") from exc
    return pynvml


@contextlib.contextmanager
def nvml_session() -> Iterator[Any]:
    """NVML initialised for the block (``pynvml``), shut down after it; NVML counts the pairs."""
    pynvml = open_nvml()
    try:
        yield pynvml
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def device_properties(cupy: Any, ordinal: int) -> dict[str, Any]:
    """``cudaGetDeviceProperties`` of device ``ordinal`` as CuPy returns it (``name`` is bytes)."""
    try:
        return cupy.cuda.runtime.getDeviceProperties(ordinal)
    except RuntimeError as exc:
        raise GpuError(f"cannot read the properties of CUDA device {ordinal}: {one_line(exc)}") from exc


def nvml_device(pynvml: Any, cupy: Any, ordinal: int) -> Any:
    """The NVML handle of CUDA device ``ordinal``.

    Found by PCI bus id: NVML numbers every GPU of the machine in PCI order, CUDA only the
    visible ones (``CUDA_VISIBLE_DEVICES``) fastest first, so the indices can differ.
    """
    try:
        bus_id = cupy.cuda.runtime.deviceGetPCIBusId(ordinal)
    except RuntimeError as exc:
        raise GpuError(f"cannot read the PCI bus id of CUDA device {ordinal}: {one_line(exc)}") from exc
    try:
        return pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
    except pynvml.NVMLError as exc:
        raise GpuError(f"NVML does not know CUDA device {ordinal} at PCI bus id {bus_id}: {one_line(exc)}") from exc


def nvml_value(pynvml: Any, query: Callable[..., Any], *args: Any) -> Any:
    """``query(*args)``, or None when this GPU or driver does not report it (NotSupported...)."""
    try:
        return query(*args)
    except pynvml.NVMLError:
        return None


# ---------------------------------------------------------------------------------------------
# The fingerprints
# ---------------------------------------------------------------------------------------------


def gpu_stack(ordinal: int = 0) -> dict[str, Any]:
    """The GPU software stack of device ``ordinal``: what a result measured on it depends on.

    Returns:
        ``driver`` (NVML's driver version string), ``cuda_driver`` (the CUDA version of the
        loaded ``libcuda``), ``cuda_runtime``, ``cudnn``, ``cudnn_frontend``, ``cublas``,
        ``cublaslt``, ``nvmath``, ``cupy`` (version strings; None for a library that cannot be
        loaded) and ``device``: name, architecture, compute capability, memory, SM count, L2
        size, maximum SM and memory clocks (MHz).

    Raises:
        GpuError: no CuPy, no CUDA device, or no NVML (the driver version is part of the
            stack; a stack without it could not tell two drivers apart).
    """
    cupy = require_cupy(ordinal)
    runtime = cupy.cuda.runtime
    properties = device_properties(cupy, ordinal)
    with nvml_session() as pynvml:
        handle = nvml_device(pynvml, cupy, ordinal)
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
        except pynvml.NVMLError as exc:
            raise GpuError(f"NVML cannot read the driver version: {one_line(exc)}") from exc
        architecture = nvml_value(pynvml, pynvml.nvmlDeviceGetArchitecture, handle)
        max_sm_clock = nvml_value(pynvml, pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM)
        max_memory_clock = nvml_value(pynvml, pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM)
        nvml_cuda = _nvml_cuda_driver_version(pynvml)
    try:
        cuda_driver: int | None = runtime.driverGetVersion()
    except RuntimeError:
        cuda_driver = nvml_cuda
    with cupy.cuda.Device(ordinal):
        cublas = _cublas_version()
    return {
        "driver": driver,
        "cuda_driver": cuda_version(cuda_driver) if cuda_driver is not None else None,
        "cuda_runtime": cuda_version(runtime.runtimeGetVersion()),
        "cudnn": _cudnn_version(),
        "cudnn_frontend": _distribution_version("nvidia-cudnn-frontend"),
        "cublas": cublas,
        "cublaslt": _cublaslt_version(),
        "nvmath": _distribution_version("nvmath-python"),
        "cupy": str(cupy.__version__),
        "device": {
            "name": _text(properties["name"]),
            "architecture": architecture_name(architecture) if architecture is not None else None,
            "compute_capability": [int(properties["major"]), int(properties["minor"])],
            "memory_bytes": int(properties["totalGlobalMem"]),
            "sm_count": int(properties["multiProcessorCount"]),
            "l2_bytes": int(properties["l2CacheSize"]),
            "max_sm_clock_mhz": max_sm_clock,
            "max_memory_clock_mhz": max_memory_clock,
        },
    }


def gpu_system(ordinal: int = 0) -> dict[str, Any]:
    """What the system fingerprint adds for GPU ``ordinal``: which board this is, and how many.

    Keys are prefixed ``gpu_`` so they merge into ``system_fingerprint()`` without replacing
    the CPU's (``memory_bytes``). ``gpu_count`` counts the machine's GPUs (NVML),
    ``gpu_visible`` the ones CUDA shows this process.

    Raises:
        GpuError: no CuPy, no CUDA device, or no NVML.
    """
    cupy = require_cupy(ordinal)
    runtime = cupy.cuda.runtime
    properties = device_properties(cupy, ordinal)
    bus_id = runtime.deviceGetPCIBusId(ordinal)
    with nvml_session() as pynvml:
        handle = nvml_device(pynvml, cupy, ordinal)
        uuid = nvml_value(pynvml, pynvml.nvmlDeviceGetUUID, handle)
        count = nvml_value(pynvml, pynvml.nvmlDeviceGetCount)
    return {
        "gpu_name": _text(properties["name"]),
        "gpu_uuid": uuid,
        "gpu_pci_bus_id": bus_id,
        "gpu_memory_bytes": int(properties["totalGlobalMem"]),
        "gpu_compute_capability": [int(properties["major"]), int(properties["minor"])],
        "gpu_count": count,
        "gpu_visible": runtime.getDeviceCount(),
    }


def _nvml_cuda_driver_version(pynvml: Any) -> int | None:
    for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        query = getattr(pynvml, name, None)
        if query is not None:
            value = nvml_value(pynvml, query)
            if value is not None:
                return int(value)
    return None


def _cudnn_version() -> str | None:
    """cuDNN as the frontend loads it; else ``cudnnGetVersion`` through ctypes (``cudnn_legacy``)."""
    try:
        import cudnn

        return cudnn_version_of(cudnn.backend_version())
    except (ImportError, OSError, RuntimeError, AttributeError):
        pass
    try:
        from benanza.runtimes.cuda import cudnn_legacy

        version = cudnn_legacy.cudnn_version()
        return version if isinstance(version, str) else cudnn_version_of(version)
    except (ImportError, OSError, RuntimeError, AttributeError, GpuError):
        return None


def _cublas_version() -> str | None:
    """cuBLAS as CuPy loads it (``cublasGetVersion`` needs a handle; a private one, destroyed)."""
    try:
        from cupy_backends.cuda.libs import cublas

        handle = cublas.create()
    except (ImportError, OSError, RuntimeError):
        return None
    try:
        return cublas_version_of(cublas.getVersion(handle))
    except RuntimeError:
        return None
    finally:
        with contextlib.suppress(RuntimeError):
            cublas.destroy(handle)


def _cublaslt_version() -> str | None:
    """cublasLt as nvmath-python loads it (the library of the cublasLt candidates)."""
    try:
        from nvmath.bindings import cublasLt

        return cublas_version_of(cublasLt.get_version())
    except (ImportError, OSError, RuntimeError, AttributeError):
        return None


def _distribution_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
