"""The GPU stack fingerprint: pure parsers of the libraries' version encodings and NVML enums.

The parsers are checked against hand-computed values (and, where nvidia-ml-py happens to be
installed, against its constants). ``gpu_stack`` and ``gpu_system`` raise a one-line
``GpuError`` on a machine without a usable GPU, whether or not CuPy and nvidia-ml-py are
installed; on a GPU machine the ``gpu`` tests check what they return.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from benanza.errors import GpuError
from benanza.fingerprint import stack_fingerprint, stack_id
from benanza.runtimes.cuda.stack import (
    ARCHITECTURES,
    CLOCKS_EVENT_REASONS,
    architecture_name,
    cublas_version_of,
    cuda_version,
    cudnn_version_of,
    gpu_stack,
    gpu_system,
    throttle_reason_names,
    throttled,
)

# -- version encodings ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoded", "version"),
    [(12040, "12.4"), (13000, "13.0"), (12090, "12.9"), (11080, "11.8"), (10010, "10.1"), (13010, "13.1")],
)
def test_cuda_version_is_thousands_major_tens_minor(encoded: int, version: str) -> None:
    assert cuda_version(encoded) == version


@pytest.mark.parametrize(
    ("encoded", "version"),
    [
        (90100, "9.1.0"),  # cuDNN 9: 10000 * major + 100 * minor + patch
        (91000, "9.10.0"),
        (91302, "9.13.2"),
        (90000, "9.0.0"),
        (8907, "8.9.7"),  # cuDNN 8 and older: 1000 * major + 100 * minor + patch
        (8100, "8.1.0"),
        (7605, "7.6.5"),
    ],
)
def test_cudnn_version_reads_both_encodings(encoded: int, version: str) -> None:
    assert cudnn_version_of(encoded) == version


@pytest.mark.parametrize(
    ("encoded", "version"),
    [
        (120304, "12.3.4"),  # cuBLAS 11.9 and later: 10000 * major + 100 * minor + patch
        (130101, "13.1.1"),
        (121000, "12.10.0"),
        (110902, "11.9.2"),
        (11605, "11.6.5"),  # cuBLAS 11.8 and older: 1000 * major + 100 * minor + patch
        (10201, "10.2.1"),
    ],
)
def test_cublas_version_reads_both_encodings(encoded: int, version: str) -> None:
    assert cublas_version_of(encoded) == version


@pytest.mark.parametrize("parse", [cuda_version, cudnn_version_of, cublas_version_of, throttle_reason_names, throttled])
def test_parsers_refuse_negative_numbers(parse) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        parse(-1)


# -- NVML enumerations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "name"),
    [(2, "Kepler"), (5, "Volta"), (7, "Ampere"), (8, "Ada"), (9, "Hopper"), (10, "Blackwell")],
)
def test_architecture_names(value: int, name: str) -> None:
    assert architecture_name(value) == name


def test_unknown_architectures_keep_their_number() -> None:
    assert architecture_name(0xFFFFFFFF) == "unknown"
    assert architecture_name(42) == "unknown-42"
    assert architecture_name(42) != architecture_name(43)


def test_architecture_table_matches_nvidia_ml_py() -> None:
    pynvml = pytest.importorskip("pynvml")  # pure Python: needs no GPU, only the package
    for value, name in ARCHITECTURES.items():
        assert getattr(pynvml, f"NVML_DEVICE_ARCH_{name.upper()}") == value


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0, []),
        (0x1, ["GpuIdle"]),
        (0x2, ["ApplicationsClocksSetting"]),
        (0x4 | 0x40, ["SwPowerCap", "HwThermalSlowdown"]),
        (0x101, ["GpuIdle", "DisplayClockSetting"]),
        (0x8 | 0x10 | 0x20 | 0x80, ["HwSlowdown", "SyncBoost", "SwThermalSlowdown", "HwPowerBrakeSlowdown"]),
        (0x800, ["0x800"]),  # a bit this table does not know is kept, not dropped
    ],
)
def test_throttle_reason_names(mask: int, names: list[str]) -> None:
    assert throttle_reason_names(mask) == names


@pytest.mark.parametrize(
    ("mask", "expected"),
    [(0, False), (0x1, False), (0x2, False), (0x3, False), (0x4, True), (0x41, True), (0x100, True), (0x8, True)],
)
def test_throttled_ignores_idle_and_application_clocks(mask: int, expected: bool) -> None:
    assert throttled(mask) is expected


def test_clocks_event_bits_match_nvidia_ml_py() -> None:
    pynvml = pytest.importorskip("pynvml")
    for bit, name in CLOCKS_EVENT_REASONS.items():
        constant = getattr(pynvml, f"nvmlClocksEventReason{name}", None)
        if constant is None:  # BoardLimit, Reliability: only under the older ThrottleReason name
            constant = getattr(pynvml, f"nvmlClocksThrottleReason{name}")
        assert constant == bit


# -- no GPU libraries at import, GpuError without a GPU -------------------------------------------


def test_importing_the_gpu_modules_loads_no_gpu_library() -> None:
    code = (
        "import sys\n"
        "import benanza.runtimes.cuda.stack, benanza.runtimes.cuda.device\n"
        "loaded = [m for m in ('cupy', 'cupy_backends', 'pynvml', 'cudnn', 'nvmath') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("fingerprint", [gpu_stack, gpu_system])
def test_without_a_gpu_the_fingerprints_say_what_is_missing(no_gpu: None, fingerprint) -> None:
    with pytest.raises(GpuError) as raised:
        fingerprint()
    message = str(raised.value)
    assert "\n" not in message
    assert re.search(r"CuPy|CUDA device|NVML|nvidia-ml-py", message), message


# -- on a GPU ------------------------------------------------------------------------------------

VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")


@pytest.mark.gpu
def test_gpu_stack_is_plain_data_without_the_board_identity() -> None:
    stack = gpu_stack()
    system = gpu_system()
    assert VERSION.match(stack["cuda_driver"]) and VERSION.match(stack["cuda_runtime"])
    assert re.match(r"^\d+\.\d+", stack["driver"])
    for library in ("cudnn", "cublas", "cublaslt", "cupy", "cudnn_frontend", "nvmath"):
        assert stack[library] is None or re.match(r"^\d+\.\d+", stack[library]), (library, stack[library])
    device = stack["device"]
    assert device["name"] == system["gpu_name"]
    assert isinstance(device["architecture"], str) and device["architecture"]
    assert all(isinstance(v, int) for v in device["compute_capability"]) and device["compute_capability"][0] >= 5
    assert device["sm_count"] > 0 and device["l2_bytes"] > 0 and device["memory_bytes"] > 0
    assert device["max_sm_clock_mhz"] is None or device["max_sm_clock_mhz"] > 0

    text = json.dumps(stack)  # JSON-serialisable: the stack is stored and hashed
    assert system["gpu_uuid"] and system["gpu_uuid"] not in text and "uuid" not in text
    assert system["gpu_pci_bus_id"] not in text
    assert system["gpu_count"] >= 1 and system["gpu_visible"] >= 1

    # The same stack twice is the same id, composed with the CPU stack as the runtime does.
    assert stack_id(stack_fingerprint({"gpu": stack})) == stack_id(stack_fingerprint({"gpu": gpu_stack()}))
