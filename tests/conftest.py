"""Shared fixtures: the ONNX zoo shipped in the onnx wheel, and in-memory model builders."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from benanza.model.process import ProcessedModel, process_model
from benanza.model.request import BindingRequest


@functools.cache
def cuda_device_reason() -> str | None:
    """None when a CUDA device is usable here, else why the ``gpu`` tests are skipped."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install 'benanza[gpu]')"
    try:
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
    except Exception as exc:  # no driver, no device: CuPy raises its own runtime errors
        return f"no CUDA device: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return "no CUDA device"


@pytest.fixture(scope="session")
def no_gpu_reason() -> str | None:
    """Why no CUDA device can be used here, or None where one can."""
    return cuda_device_reason()


@pytest.fixture
def no_gpu(no_gpu_reason: str | None) -> None:
    """Skip where a CUDA device is usable: the test checks what happens without one."""
    if no_gpu_reason is None:
        pytest.skip("a CUDA device is usable here")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu``-marked tests where no CUDA device can be used (CI, laptops)."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = cuda_device_reason()
    if reason is None:
        return
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=f"gpu test: {reason}"))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Say how to run the slow tests a selection left out (pyproject's addopts deselects them; CI runs both)."""
    deselected = sum("slow" in item.keywords for item in terminalreporter.stats.get("deselected", []))
    if deselected:
        tests = "1 slow test was" if deselected == 1 else f"{deselected} slow tests were"
        terminalreporter.write_line(f"{tests} deselected: `python -m pytest -q -m slow` runs them (CI runs both)")


ZOO_MODELS = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)


@pytest.fixture(scope="session")
def zoo_dir() -> Path:
    """The light (weight-free) zoo models that ship inside the onnx wheel."""
    path = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
    if not path.is_dir():
        pytest.skip(f"onnx wheel has no light zoo models at {path}")
    return path


@pytest.fixture(scope="session")
def zoo_path(zoo_dir: Path) -> Callable[[str], Path]:
    """``zoo_path("resnet50")`` -> the path of ``light_resnet50.onnx``."""

    def path_of(name: str) -> Path:
        return zoo_dir / f"light_{name}.onnx"

    return path_of


@pytest.fixture(scope="session")
def zoo_model(zoo_path: Callable[[str], Path]) -> Callable[..., ProcessedModel]:
    """``zoo_model("resnet50", batch=1)``: processed once per session, then cached.

    The result is a frozen value; tests must not mutate its ``proto``.
    """

    @functools.cache
    def cached(name: str, batch: int | None) -> ProcessedModel:
        return process_model(zoo_path(name), batch=batch)

    def processed(name: str, batch: int | None = 1) -> ProcessedModel:
        return cached(name, batch)  # one cache entry whether batch is passed by name or not

    return processed


@pytest.fixture(scope="session")
def build_model() -> Callable[..., onnx.ModelProto]:
    """An in-memory ONNX model from nodes, ``(name, elem_type, shape)`` inputs/outputs and arrays.

    ``initializers`` maps names to numpy arrays; ``opset`` is the default domain's version;
    ``extra_opsets`` adds ``{domain: version}`` imports. The model passes the ONNX checker
    unless ``check=False``. An output's shape may be None: processing clears output shapes
    and infers them again.
    """

    def build(
        nodes: Sequence[onnx.NodeProto],
        inputs: Sequence[tuple[str, int, Sequence[int | str] | None]],
        outputs: Sequence[tuple[str, int, Sequence[int | str] | None]],
        initializers: dict[str, np.ndarray] | None = None,
        opset: int = 17,
        extra_opsets: dict[str, int] | None = None,
        functions: Sequence[onnx.FunctionProto] = (),
        check: bool = True,
    ) -> onnx.ModelProto:
        graph = helper.make_graph(
            list(nodes),
            "test_graph",
            [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
            # the checker wants an output shape; None gives an empty one (processing re-infers outputs)
            [helper.make_tensor_value_info(n, t, [] if s is None else s) for n, t, s in outputs],
            initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in (initializers or {}).items()],
        )
        imports = [helper.make_opsetid("", opset)]
        imports += [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
        model = helper.make_model(graph, opset_imports=imports, functions=list(functions))
        if check:
            onnx.checker.check_model(model)
        return model

    return build


@pytest.fixture(scope="session")
def random_length_model(build_model: Callable[..., onnx.ModelProto]) -> onnx.ModelProto:
    """A model whose output's length changes from call to call, as a text-to-speech model's audio does
    (VITS draws its durations at random): NonZero of 16 random draws below 0.5 (seeded: one sequence per
    session), fed ``x``, float32 of 16."""
    return build_model(
        [
            helper.make_node("RandomUniformLike", ["x"], ["r"], seed=3.0),
            helper.make_node("Less", ["r", "half"], ["keep"]),
            helper.make_node("NonZero", ["keep"], ["where"]),
        ],
        [("x", onnx.TensorProto.FLOAT, [16])],
        [("where", onnx.TensorProto.INT64, [1, None])],
        {"half": np.array(0.5, np.float32)},
    )


@pytest.fixture(scope="session")
def process_proto() -> Callable[..., ProcessedModel]:
    """Process an in-memory model as if it were read from ``mem.onnx``."""

    def run(model: onnx.ModelProto, batch: int | None = None, shapes: dict | None = None) -> ProcessedModel:
        return process_model("mem.onnx", batch, BindingRequest(shapes or {}), proto=model)

    return run


@pytest.fixture(scope="session")
def fast_harness():
    """Harness settings that measure a benchmark in milliseconds: for pipeline tests, not timing."""
    from benanza.bench.harness import HarnessSettings

    return HarnessSettings(
        warmup_runs=1,
        min_samples=3,
        max_samples=50,
        min_time_s=0.001,
        max_time_s=0.05,
        min_sample_time_s=0.0,
        kernel_runs=3,
    )


@pytest.fixture(scope="session")
def conv_chain(build_model: Callable[..., onnx.ModelProto]) -> Callable[..., onnx.ModelProto]:
    """``conv_chain(tail="reshape")``: Conv -> BatchNormalization -> Relu -> Conv -> tail.

    Input ``x`` is ``batch x 3 x 8 x 8``; the first Conv has a bias and ``channels`` filters.
    ``tail`` is ``"reshape"`` (to ``[batch, -1]``, a VALUE input) or ``"maxpool"`` (2x2,
    stride 2). ``prefix`` renames every node and tensor, so renamed copies can be compared.
    ONNX Runtime (``extended``) runs Conv+BN+Relu as one fused kernel.
    """

    def build(tail: str = "reshape", *, prefix: str = "", channels: int = 4, batch: int = 1) -> onnx.ModelProto:
        def n(name: str) -> str:
            return f"{prefix}{name}"

        rng = np.random.default_rng(0)
        inits = {
            n("w1"): rng.standard_normal((channels, 3, 3, 3)).astype(np.float32),
            n("b1"): rng.standard_normal(channels).astype(np.float32),
            n("scale"): rng.random(channels).astype(np.float32) + 0.5,
            n("shift"): rng.standard_normal(channels).astype(np.float32),
            n("mean"): rng.standard_normal(channels).astype(np.float32),
            n("var"): rng.random(channels).astype(np.float32) + 0.5,
            n("w2"): rng.standard_normal((channels, channels, 1, 1)).astype(np.float32),
        }
        nodes = [
            helper.make_node("Conv", [n("x"), n("w1"), n("b1")], [n("c1")], name=n("conv1"), pads=[1, 1, 1, 1]),
            helper.make_node(
                "BatchNormalization",
                [n("c1"), n("scale"), n("shift"), n("mean"), n("var")],
                [n("bn")],
                name=n("bn1"),
            ),
            helper.make_node("Relu", [n("bn")], [n("r")], name=n("relu1")),
            helper.make_node("Conv", [n("r"), n("w2")], [n("c2")], name=n("conv2")),
        ]
        if tail == "reshape":
            inits[n("target")] = np.array([batch, -1], dtype=np.int64)
            nodes.append(helper.make_node("Reshape", [n("c2"), n("target")], [n("y")], name=n("flatten")))
        elif tail == "maxpool":
            nodes.append(
                helper.make_node("MaxPool", [n("c2")], [n("y")], name=n("pool"), kernel_shape=[2, 2], strides=[2, 2])
            )
        else:
            raise ValueError(f"unknown tail {tail!r}")
        return build_model(
            nodes,
            [(n("x"), onnx.TensorProto.FLOAT, [batch, 3, 8, 8])],
            [(n("y"), onnx.TensorProto.FLOAT, None)],
            inits,
        )

    return build


# -- MongoDB servers for the store contract ----------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_nx_27017(data_dir: Path, port: int | None = None, timeout_s: float = 20.0):
    """Start an nx-27017 server (MongoDB wire protocol over SQLite) on 127.0.0.1; returns ``(process, base_uri)``.

    Each logical database is one SQLite file in ``data_dir``; the server is up when pymongo can
    ping it. The caller terminates the process. ``port`` reuses a port (e.g. to restart a server
    on its data).
    """
    import subprocess
    import sys
    import time

    pymongo = pytest.importorskip("pymongo")
    pytest.importorskip("nx_27017")
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
    log = data_dir / "nx-27017.log"
    command = [sys.executable, "-m", "nx_27017.nx_27017", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--data-dir", str(data_dir), "--log-file", str(log), "--pid-file", str(data_dir / "nx-27017.pid")]
    with (data_dir / "nx-27017.out").open("ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    uri = f"mongodb://127.0.0.1:{port}"
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=250, connectTimeoutMS=250)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                client.admin.command("ping")
                return proc, uri
            except pymongo.errors.PyMongoError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    output = (data_dir / "nx-27017.out").read_text(errors="replace")[-2000:]
                    pytest.fail(f"nx-27017 did not start on port {port} (exit {proc.returncode}): {output}")
                time.sleep(0.05)
    finally:
        client.close()


def stop_process(proc) -> None:  # a subprocess.Popen
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except Exception:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def nx_mongodb_uri(tmp_path_factory: pytest.TempPathFactory):
    """The base URI (``mongodb://127.0.0.1:PORT``, no database) of an nx-27017 server for this session.

    Tests append a fresh database name; the server and its data go away at the end.
    """
    proc, uri = start_nx_27017(tmp_path_factory.mktemp("nx-27017"))
    yield uri
    stop_process(proc)


@pytest.fixture(scope="session")
def real_mongodb_uri() -> str:
    """``$BENANZA_TEST_MONGODB_URI`` (a real MongoDB the tests may create databases in), or skip."""
    uri = os.environ.get("BENANZA_TEST_MONGODB_URI")
    if not uri:
        pytest.skip("BENANZA_TEST_MONGODB_URI is not set (a real MongoDB for the store contract)")
    return uri


@pytest.fixture
def nx_27017_factory():
    """``start(data_dir, port=None) -> (process, base_uri)``: nx-27017 servers a test may stop and restart.

    Stop one with ``stop_process(process)`` (or ``process.kill()``); restart it on its data by
    passing the same ``data_dir`` and port. Every server still running is stopped afterwards.
    """
    started = []

    def start(data_dir: Path, port: int | None = None):
        proc, uri = start_nx_27017(data_dir, port)
        started.append(proc)
        return proc, uri

    yield start
    for proc in started:
        if proc.poll() is None:
            stop_process(proc)


@pytest.fixture(autouse=True)
def _other_processes_unknown(request, monkeypatch):
    """The harness's other-processes check (``benanza.bench.host_cpu``) reads the whole host's CPU
    time, and in this suite the host runs the suite's own Ray clusters and subprocesses, which go on
    for a while after their test: a later test's benchmark would be measured again and flagged for
    them. Every test but those of the check itself (``test_interference.py``, with real competitor
    processes) runs as on a host whose other processes cannot be read, as where ``/proc/stat`` is
    absent; the CPU-share and step checks stay on."""
    if request.module.__name__.rsplit(".", 1)[-1] != "test_interference":
        monkeypatch.setattr("benanza.bench.host_cpu.host_busy_s", lambda *a, **k: None)
