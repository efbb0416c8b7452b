"""Credentials never leave the store URI: a planted password is in no output of any command.

Every command that takes a database is run with a MongoDB URI holding the password
``S3cr3t/x@y``: written correctly (escaped, authenticating for real against nx-27017 behind
``mongo_auth.PlainAuthProxy``), in the query string, and malformed in the ways people get it
wrong (an unescaped ``/``, ``@`` or ``?``, no host, no scheme, several hosts, ``mongodb+srv``).
Its stdout, stderr, JSON and log records must hold neither the password, nor its escaped form,
nor a part of it. A fleet run on a real Ray cluster must leave it out of Ray's job table (which
stores the driver's command line) and out of Ray's logs.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

import benanza
from benanza.cli import app

pytest.importorskip("pymongo")

USER, PASSWORD = "alice", "S3cr3t/x@y"
ESCAPED = "S3cr3t%2Fx%40y"
# The password, its escaped forms and its parts: none may be shown anywhere.
LEAKS = ("S3cr3t", "x@y", "x%40y", "%2Fx", "x%2540y")
SYSTEM = "cred-system"
FAST_ENV = {
    "BENANZA_DB": None,
    "BENANZA_DB_FILE": None,
    "BENANZA_SYSTEM": SYSTEM,
    "BENANZA_DB_RETRY_WINDOW_S": "0",
    "BENANZA_HARNESS_WARMUP_RUNS": "1",
    "BENANZA_HARNESS_MIN_SAMPLES": "3",
    "BENANZA_HARNESS_KERNEL_RUNS": "2",
    "BENANZA_HARNESS_MIN_TIME_S": "0.001",
    "BENANZA_HARNESS_MAX_TIME_S": "0.02",
}
FAST_FLAGS = ["--min-time", "0.001", "--max-time", "0.02", "--threads", "1", "--system", SYSTEM]


def leaks_in(text: str) -> list[str]:
    return [form for form in LEAKS if form in text]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Relu on a 1x4 tensor: the smallest model every command can plan and benchmark."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    path = tmp_path_factory.mktemp("cred-model") / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def proxy(nx_mongodb_uri: str):
    """nx-27017 with the user ``alice`` and the planted password (SASL PLAIN)."""
    from mongo_auth import PlainAuthProxy

    server = PlainAuthProxy(("127.0.0.1", int(nx_mongodb_uri.rsplit(":", 1)[1])), USER, PASSWORD)
    yield server
    server.close()


def uri_variants(proxy_port: int, nx_port: int, db: str, folder: Path) -> dict[str, str]:
    """Name -> URI; the first two are valid and reach the database, the others fail."""
    auth = "authMechanism=PLAIN&authSource=$external"
    fast = "serverSelectionTimeoutMS=300&connectTimeoutMS=300"
    server = f"127.0.0.1:{proxy_port}"
    return {
        "escaped": f"mongodb://{USER}:{ESCAPED}@{server}/{db}?{auth}",
        "query-secret": f"mongodb://127.0.0.1:{nx_port}/{db}?authMechanismProperties=AWS_SESSION_TOKEN:S3cr3t",
        "wrong-password": f"mongodb://{USER}:S3cr3tWRONG@{server}/{db}?{auth}",
        "scram-refused": f"mongodb://{USER}:{ESCAPED}@{server}/{db}",
        "unescaped-slash": f"mongodb://{USER}:{PASSWORD}@{server}/{db}?{auth}",
        "unescaped-at": f"mongodb://{USER}:pa@S3cr3t@{server}/{db}?{auth}",
        "unescaped-question": f"mongodb://{USER}:S3cr3t?x@y@{server}/{db}",
        "no-host": f"mongodb://{USER}:S3cr3t",
        "no-scheme": f"{USER}:{ESCAPED}@{server}/{db}",
        "several-hosts": f"mongodb://{USER}:{ESCAPED}@{server},127.0.0.1:{nx_port}/{db}?{auth}&{fast}",
        "srv": f"mongodb+srv://{USER}:{ESCAPED}@cluster0.invalid/{db}?{fast}",
        "tls-key-password": (
            f"mongodb://127.0.0.1:{nx_port}/{db}?tls=true&tlsCertificateKeyFile={folder}/none.pem"
            "&tlsCertificateKeyFilePassword=S3cr3t"
        ),
        "password-option": f"mongodb://127.0.0.1:{nx_port}/{db}?password=S3cr3t&{fast}",
        "sqlite-userinfo": f"sqlite://{USER}:{ESCAPED}@{folder}/x.db",
    }


VALID = ("escaped", "query-secret")


def commands(model: Path) -> list[list[str]]:
    """Every command that takes ``--db``, on its normal and its error paths (``--db`` is appended)."""
    m = str(model)
    return [
        ["bench", "run", m, *FAST_FLAGS, "--format", "json"],
        ["bench", "run", m, *FAST_FLAGS],
        ["run", m, *FAST_FLAGS, "--granularity", "1"],
        ["run", m, *FAST_FLAGS, "--granularity", "1", "--format", "json"],
        ["db", "ls"],
        ["db", "ls", "--format", "json"],
        ["analyze", "lower-bound", m, "--granularity", "1", "--threads", "1"],
        ["analyze", "lower-bound", m, "--system", SYSTEM, "--granularity", "1"],
        ["analyze", "lower-bound", m, "--system", "all", "--format", "json"],
        ["analyze", "lower-bound", m, "--system", "nope"],
        ["analyze", "lower-bound", m, "--system", SYSTEM, "--stack", "nope"],
        ["analyze", "systems", m],
        ["analyze", "systems", m, "--format", "json"],
        ["analyze", "systems", m, "--system", "nope"],
        ["analyze", "optimizations", m],
        ["fleet", "status", "--models", m],
        ["fleet", "status", "--models", m, "--format", "json"],
    ]


def check_invocation(args: list[str], caplog: pytest.LogCaptureFixture) -> int:
    """Run one command in-process; it must end handled (0 or 2) and show no part of the password."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        result = CliRunner().invoke(app, args, env=FAST_ENV)
    shown = result.stdout + result.stderr + caplog.text
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        shown += f"{type(result.exception).__name__}: {result.exception}"
    command = " ".join(a for a in args[:3] if not a.startswith(("/", "--db")))
    lines = [line for line in shown.splitlines() if leaks_in(line)]
    assert not lines, f"{command}: the password shows in:\n" + "\n".join(line[:400] for line in lines[:5])
    assert result.exit_code in (0, 2), f"{command}: exit {result.exit_code}\n{shown[-3000:]}"
    return result.exit_code


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(uri_variants(1, 2, "db", Path("/f"))))
def test_no_command_shows_a_planted_password(
    variant: str, proxy, nx_mongodb_uri: str, tiny_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nx_port = int(nx_mongodb_uri.rsplit(":", 1)[1])
    db = f"cred_{variant.replace('-', '_')}_{os.getpid()}"
    uri = uri_variants(proxy.port, nx_port, db, tmp_path)[variant]
    exits = {}
    for args in commands(tiny_model):
        exits.setdefault(" ".join(args[:2]), check_invocation([*args, "--db", uri], caplog))  # the first: no error
        check_invocation([*args, f"--db={uri}"], caplog)
    if variant not in VALID:  # a fleet run that cannot open its store stops before Ray
        check_invocation(["fleet", "run", "--models", str(tiny_model), "-q", "--db", uri], caplog)
    else:  # the URI reached the database: the commands did their work while showing it masked
        assert exits["db ls"] == exits["bench run"] == exits["analyze systems"] == 0
        if variant == "escaped":
            assert (USER, PASSWORD) in proxy.logins


# -- Ray: the job table holds the driver's command line -------------------------------------------------


SOURCE = str(Path(benanza.__file__).parents[1])  # the benanza under test, for the driver and Ray's workers


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster whose workers import this benanza (not another installed copy)."""
    ray = pytest.importorskip("ray")
    from benanza.config import RayConfig, SystemConfig
    from benanza.fleet.systems import connect

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([SOURCE, os.environ.get("PYTHONPATH", "")]))
        with connect(RayConfig(local_cluster=True), [SystemConfig(name=SYSTEM)]) as session:
            yield session, ray


@pytest.mark.slow
def test_a_fleet_run_leaves_the_password_out_of_rays_job_table_and_logs(
    cluster, proxy, tiny_model: Path, tmp_path: Path
) -> None:
    session, ray = cluster
    config = tmp_path / "fleet.toml"
    config.write_text(
        f'models = ["{tiny_model}"]\n'
        "[harness]\nmin_time_s = 0.001\nmax_time_s = 0.02\nkernel_runs = 0\n"
        f'[[systems]]\nname = "{SYSTEM}"\nruntimes = ["null"]\n'
    )
    uri = f"mongodb://{USER}:{ESCAPED}@127.0.0.1:{proxy.port}/cred_fleet?authMechanism=PLAIN&authSource=$external"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENANZA_")}
    env["PYTHONPATH"] = os.pathsep.join([SOURCE, env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "benanza", "fleet", "run", str(config), "--address", session.address]
    cmd += ["--db", uri, "-q", "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert not leaks_in(done.stdout + done.stderr), done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["measured"] > 0  # the run wrote through the URI it was given
    assert (USER, PASSWORD) in proxy.logins
    jobs = ray._private.state.jobs()
    entrypoints = [job.get("Entrypoint", "") for job in jobs]
    assert any("fleet run" in e for e in entrypoints), entrypoints
    table = json.dumps(jobs, default=str)
    assert not leaks_in(table), [e for e in entrypoints if leaks_in(e)]
    session_dir = Path(ray._private.worker._global_node.get_session_dir_path())
    logs = [p for p in (session_dir / "logs").rglob("*") if p.is_file()]
    assert any("driver" in p.name or "worker" in p.name for p in logs), logs
    found = [p.name for p in logs if leaks_in(p.read_bytes().decode("utf-8", "replace"))]
    assert not found, f"Ray logs that hold the password: {found}"
