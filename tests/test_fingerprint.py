"""System and software-stack fingerprints."""

from __future__ import annotations

import importlib.metadata
import platform
import re
import socket

import numpy as np
import onnx
import onnxruntime
import pytest

from benanza import fingerprint
from benanza.fingerprint import (
    StackFingerprint,
    SystemFingerprint,
    stack_fingerprint,
    stack_id,
    system_fingerprint,
)
from benanza.settings import load_settings


def test_system_fingerprint_fields() -> None:
    fp = system_fingerprint()
    assert set(fp.to_doc()) == {"cpu_model", "logical_cores", "physical_cores", "memory_bytes", "os", "machine", "host"}
    assert isinstance(fp.cpu_model, str) and fp.cpu_model
    assert isinstance(fp.logical_cores, int) and fp.logical_cores >= 1
    assert fp.physical_cores is None or 1 <= fp.physical_cores <= fp.logical_cores
    assert fp.memory_bytes is None or fp.memory_bytes > 2**20
    assert fp.os == platform.platform() and fp.machine == platform.machine()
    assert fp.host == socket.gethostname()


def test_cpuinfo_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    two_sockets = [
        {"processor": str(i), "model name": "Xeon X", "physical id": str(i // 4), "core id": str(i % 4 // 2)}
        for i in range(8)
    ]  # 2 sockets x 2 cores x 2 hyperthreads
    assert fingerprint._physical_cores(two_sockets) == 4
    assert fingerprint._cpu_model(two_sockets) == "Xeon X"
    arm = [{"processor": "0", "BogoMIPS": "50"}]
    assert fingerprint._physical_cores(arm) is None
    monkeypatch.setattr(fingerprint, "_read_cpuinfo", list)  # no /proc (macOS, Windows)
    fp = system_fingerprint()
    assert fp.cpu_model == (platform.processor() or platform.machine()) and fp.physical_cores is None


def test_stack_fingerprint_fields() -> None:
    stack = stack_fingerprint()
    assert stack.python == {"implementation": platform.python_implementation(), "version": platform.python_version()}
    assert stack.numpy["version"] == np.__version__
    blas = stack.numpy["blas"]
    assert blas is None or (set(blas) == {"name", "version"} and blas["name"])
    assert stack.packages["onnx"] == onnx.__version__  # metadata agrees with the imported package
    assert stack.packages["onnxruntime"] == onnxruntime.__version__
    assert stack.runtime is None and stack.parts == {}


def test_stack_id_is_stable_and_tracks_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = stack_fingerprint(), stack_fingerprint()
    assert first == second and stack_id(first) == stack_id(second)
    assert re.fullmatch(r"[0-9a-f]{16}", stack_id(first))
    assert stack_id(dict(reversed(list(first.to_doc().items())))) == stack_id(first)  # key order does not matter

    real_version = importlib.metadata.version

    def newer_ort(dist: str) -> str:
        return "99.0.0" if dist == "onnxruntime" else real_version(dist)

    monkeypatch.setattr(importlib.metadata, "version", newer_ort)
    changed = stack_fingerprint()
    assert changed.packages["onnxruntime"] == "99.0.0" and changed.packages["onnx"] == first.packages["onnx"]
    assert stack_id(changed) != stack_id(first)


def test_stack_extra_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    base = stack_fingerprint()
    cuda = stack_fingerprint({"cuda": {"driver": "560.35", "cudnn": "9.5.0"}})
    assert cuda.parts["cuda"] == {"driver": "560.35", "cudnn": "9.5.0"} and stack_id(cuda) != stack_id(base)
    ort = stack_fingerprint(
        {"onnxruntime": {"version": onnxruntime.__version__, "providers": ["CPUExecutionProvider"]}}
    )
    assert ort.packages["onnxruntime"]["providers"] == ["CPUExecutionProvider"]  # in the package's place
    ort.to_doc()["numpy"]["version"] = "mutated"  # a document is the caller's: no shared state
    ort.numpy["version"] = "mutated"  # type: ignore[index]
    assert stack_fingerprint().numpy["version"] == np.__version__


def test_non_canonical_distribution_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def gpu_only(dist: str) -> str:
        if dist == "onnxruntime-gpu":
            return "1.20.1"
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "version", gpu_only)
    assert fingerprint.package_version("onnxruntime") == "1.20.1 (onnxruntime-gpu)"
    assert fingerprint.package_version("surely_not_an_installed_module") is None


def test_default_system_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENANZA_SYSTEM", "lab-h100")
    assert load_settings().system_name() == "lab-h100"
    monkeypatch.delenv("BENANZA_SYSTEM")
    assert load_settings().system_name() == socket.gethostname()


def test_numpys_configuration_is_read_once_per_process() -> None:
    """What made fingerprints slow: NumPy's build configuration (its BLAS) read on every call."""
    from benanza import fingerprint

    first = stack_fingerprint()
    misses = fingerprint._numpy.cache_info().misses
    assert stack_fingerprint() == first and system_fingerprint()
    assert misses <= 1 and fingerprint._numpy.cache_info().misses == misses


# -- a device's fingerprint: the same, whichever path registers the system ------------------------

DEVICE = {"gpu_name": "Test Board 80GB", "gpu_uuid": "GPU-0000", "gpu_memory_bytes": 80 * 2**30, "gpu_count": 1}


@pytest.fixture
def device_runtime(monkeypatch: pytest.MonkeyPatch):
    """The null runtime driving a (described) device, as the GPU runtime's ``system()`` describes its board.

    Registered as ``null-device`` for the test only.
    """
    from benanza.runtimes import base
    from benanza.runtimes.null import NullRuntime

    class DeviceNullRuntime(NullRuntime):
        def system(self) -> dict:
            return dict(DEVICE)

    base.runtime_names()  # the built-in runtimes registered first
    monkeypatch.setitem(base._RUNTIMES, "null-device", DeviceNullRuntime)
    return DeviceNullRuntime


def test_a_device_joins_the_system_fingerprint_at_the_top_level_on_every_path(tmp_path, device_runtime) -> None:
    """`benanza run` (local) and a fleet worker store the same device keys, and comparisons name the board.

    The two paths once differed: the local one nested the device under ``gpu`` (shown as a
    dict's text in comparisons), the fleet's worker stored none.
    """
    from benanza.config import SystemConfig
    from benanza.fleet.worker import SystemWorker
    from benanza.local import open_local
    from benanza.store.base import open_store

    assert system_fingerprint([device_runtime()]).devices == DEVICE
    db = f"sqlite:///{tmp_path / 'x.db'}"
    ctx = open_local(db, "null-device", system="local-box")
    ctx.close()
    worker = SystemWorker(SystemConfig(name="fleet-box", runtimes=["null-device"]).model_dump(mode="json"), db, {})
    worker.close()
    with open_store(db, read_only=True) as store:
        stored = {s["name"]: s["fingerprint"] for s in store.systems()}
    for name in ("local-box", "fleet-box"):
        assert stored[name].items() >= DEVICE.items(), stored[name]
        assert "gpu" not in stored[name]
        assert SystemFingerprint.from_doc(stored[name]).gpu_names() == ["Test Board 80GB"]
    assert system_fingerprint().gpu_names() == []  # a CPU system names no board


# -- typed fingerprints, stored documents unchanged ------------------------------------------------

# Documents as the code before typed fingerprints wrote them (dict order as stored in MongoDB; SQLite
# sorts the keys): a fleet worker's GPU system, with its config entry, and an ONNX Runtime stack.
STORED_SYSTEM = (
    '{"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_uuid": "GPU-5d1c", "gpu_memory_bytes": 85899345920, '
    '"gpu_compute_capability": "9.0", "cpu_model": "AMD EPYC", "logical_cores": 2, "physical_cores": 2, '
    '"memory_bytes": 25276510208, "os": "Linux-6.18.44-x86_64-with-glibc2.36", "machine": "x86_64", '
    '"host": "vm", "config": {"name": "h100", "kind": "gpu", "price_per_hour": 2.5}}'
)
STORED_STACK = (
    '{"python": {"implementation": "CPython", "version": "3.11.7"}, "numpy": {"version": "2.1.0", '
    '"blas": {"name": "scipy-openblas", "version": "0.3.27"}}, "onnx": "1.17.0", "onnxruntime": "1.20.1", '
    '"runtime": "onnxruntime", "providers": "CPUExecutionProvider"}'
)
STORED_STACK_ID = "397fc287b4a437e2"  # what stack_id gave for STORED_STACK before the stacks were typed


def test_stored_documents_read_and_write_back_byte_for_byte() -> None:
    import json

    system = SystemFingerprint.from_doc(json.loads(STORED_SYSTEM))
    assert (system.cpu_model, system.logical_cores, system.host) == ("AMD EPYC", 2, "vm")
    assert system.gpu_names() == ["NVIDIA H100 80GB HBM3"] and system.price_per_hour() == 2.5
    assert system.config == {"name": "h100", "kind": "gpu", "price_per_hour": 2.5} and system.extra == {}
    assert json.dumps(system.to_doc()) == STORED_SYSTEM  # the same keys, in the same order
    stack = StackFingerprint.from_doc(json.loads(STORED_STACK))
    assert stack.runtime == "onnxruntime" and stack.packages == {"onnx": "1.17.0", "onnxruntime": "1.20.1"}
    assert stack.parts == {"providers": "CPUExecutionProvider"}
    assert json.dumps(stack.to_doc()) == STORED_STACK
    assert stack.stack_id == stack_id(stack) == stack_id(json.loads(STORED_STACK)) == STORED_STACK_ID
    # a hand-written or older entry keeps what it holds
    old = {"cpu_model": "x", "gpus": [{"name": "A100"}, "V100"], "config": "not a table"}
    read = SystemFingerprint.from_doc(old)
    assert read.gpu_names() == ["A100", "V100"] and read.config is None and read.price_per_hour() is None
    assert read.to_doc().items() >= old.items()


def test_a_registered_system_and_stack_are_the_documents_the_untyped_code_wrote(tmp_path, device_runtime) -> None:
    """What ``targets.register`` stores: the fingerprint's fields flat, the config entry last; the stack as built."""
    from benanza.store.base import open_store
    from benanza.targets import open_target, register

    target = open_target("null-device")
    config = {"name": "box", "kind": "gpu"}
    db = f"sqlite:///{tmp_path / 'r.db'}"
    with open_store(db) as store:
        assert register(store, "box", [target], config) == {target.stack_id: True}
        ((name, stored),) = [(s["name"], s["fingerprint"]) for s in store.systems()]
        (stack,) = store.stacks("box")
    untyped = {**DEVICE, **system_fingerprint().to_doc(), "config": config}  # the old merge of dicts
    assert name == "box" and stored == untyped  # (SQLite stores the keys sorted; MongoDB as to_doc orders them)
    fingerprint = system_fingerprint([target.runtime]).with_config(config)
    assert list(fingerprint.to_doc()) == list(untyped)
    assert stack["stack"] == target.stack.to_doc() and stack["stack_id"] == stack_id(stack["stack"])
    assert StackFingerprint.from_doc(stack["stack"]) == target.stack
    assert target.stack.runtime == target.runtime.name
