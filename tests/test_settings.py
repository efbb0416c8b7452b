"""The ``BENANZA_*`` variables: one ``Settings`` object, read at the edge, handed down.

Each documented variable still means what it meant; an invalid one is a one-line error
naming it (a ``UsageError``, exit status 2 from the CLI); below the edge nothing reads the
process environment.
"""

from __future__ import annotations

import pickle
import re
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benanza.cli import app
from benanza.errors import UsageError
from benanza.settings import HarnessSettings, Settings, default_settings, load_settings
from benanza.store.base import open_store
from benanza.store.uri import StoreURI, resolve_store_uri

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "benanza"
# Where the process environment may be read: the settings themselves; a fleet file's ``${VAR}``
# references; Ray's own variables (RAY_TMPDIR, Ray's auth token) around ``ray.init``; and the CUDA
# libraries' own NVIDIA_TF32_OVERRIDE, which the cuDNN runtime reports as the library will behave.
# supervisor.py hands its child this environment whole (with PYTHONPATH where a checkout needs it), reading none
MAY_READ_ENVIRONMENT = {
    "settings.py",
    "config.py",
    "fleet/systems.py",
    "runtimes/cuda/cudnn_legacy.py",
    "supervisor.py",
}
# Variables the README names that are not benanza's settings: test switches and the deploy files' own.
NOT_SETTINGS = re.compile(r"BENANZA_(TEST_\w+|MONGO_\w+)")


def test_only_the_settings_read_the_environment() -> None:
    readers = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if re.search(r"os\.environ|getenv|environ\.get", path.read_text(encoding="utf-8"))
    }
    assert readers <= MAY_READ_ENVIRONMENT, sorted(readers - MAY_READ_ENVIRONMENT)
    own_names = {
        name
        for name in MAY_READ_ENVIRONMENT - {"settings.py"}
        if re.search(r"environ(\.get\(|\[)[\"']BENANZA_", (PACKAGE / name).read_text(encoding="utf-8"))
    }
    assert not own_names  # config.py's ${VAR} reads any name it is given, never one of its own


def test_every_variable_the_readme_names_is_a_setting() -> None:
    named = set(re.findall(r"BENANZA_[A-Z_]*[A-Z]", (ROOT / "README.md").read_text(encoding="utf-8")))
    fields = {f"BENANZA_{name.upper()}" for name in Settings.model_fields}
    harness = {f"BENANZA_HARNESS_{name.upper()}" for name in HarnessSettings.model_fields}
    unknown = {v for v in named if not NOT_SETTINGS.fullmatch(v)} - fields - harness - {"BENANZA_HARNESS"}
    assert named and not unknown, sorted(unknown)


def test_each_variable_keeps_its_meaning(tmp_path: Path) -> None:
    env = {
        "BENANZA_SYSTEM": "lab-h100",
        "BENANZA_KEEP_REPEATS": "3",
        "BENANZA_DB_RETRY_WINDOW_S": "0.5",
        "BENANZA_SPILL_DIR": str(tmp_path / "spill"),
        "BENANZA_HARNESS_MAX_TIME_S": "0.25",
        "BENANZA_HARNESS_SCHEDULE": "sequential",
        "BENANZA_HARNESS_INTERLEAVE_MAX_SESSIONS": "8",  # several underscores: still one field
        "BENANZA_TEST_MONGODB_URI": "mongodb://elsewhere/x",  # not a setting: ignored
        "PATH": "/bin",
    }
    settings = load_settings(env)
    assert settings.system_name() == "lab-h100"
    assert settings.keep_repeats == 3 and settings.db_retry_window_s == 0.5
    assert settings.spill_path() == tmp_path / "spill"
    harness = settings.harness_settings()
    assert (harness.max_time_s, harness.schedule, harness.interleave_max_sessions) == (0.25, "sequential", 8)
    assert harness.min_samples == HarnessSettings().min_samples  # the rest keep their defaults
    # a fleet file's [harness] sits below the variables, a flag above them
    assert settings.harness_settings({"max_time_s": 1.0, "min_samples": 4}).max_time_s == 0.25
    assert settings.harness_settings({"min_samples": 4}, max_time_s=0.5).min_samples == 4
    assert settings.harness_settings(max_time_s=0.5).max_time_s == 0.5
    uri_file = tmp_path / "uri"
    uri_file.write_text("sqlite:///from-file.db\n")
    assert resolve_store_uri(settings=load_settings({"BENANZA_DB": "sqlite:///e.db"})) == StoreURI("sqlite:///e.db")
    assert resolve_store_uri(settings=load_settings({"BENANZA_DB_FILE": str(uri_file)})) == StoreURI(
        "sqlite:///from-file.db"
    )
    # unset or empty: the defaults
    for empty in ({}, {"BENANZA_SYSTEM": "", "BENANZA_KEEP_REPEATS": "", "BENANZA_DB": ""}):
        settings = load_settings(empty)
        assert settings == default_settings()
        assert settings.system_name() == socket.gethostname() and settings.keep_repeats == 10
        assert settings.db_retry_window_s == 20.0 and settings.harness_settings() == HarnessSettings()
        assert resolve_store_uri(settings=settings) == StoreURI("sqlite:///benanza.db")


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("BENANZA_KEEP_REPEATS", "-1", "greater than or equal to 0"),
        ("BENANZA_KEEP_REPEATS", "many", "valid integer"),
        ("BENANZA_DB_RETRY_WINDOW_S", "soon", "valid number"),
        ("BENANZA_DB_RETRY_WINDOW_S", "-2", "greater than or equal to 0"),
        ("BENANZA_HARNESS_MIN_SAMPLES", "0", "greater than or equal to 1"),
        ("BENANZA_HARNESS_SCHEDULE", "random", "'sequential' or 'interleaved'"),
    ],
)
def test_an_invalid_value_is_one_line_naming_the_variable(variable: str, value: str, reason: str) -> None:
    with pytest.raises(UsageError) as info:
        load_settings({variable: value})
    message = str(info.value)
    assert message.startswith(f"{variable}: ") and reason in message and repr(value) in message
    assert "\n" not in message
    done = CliRunner().invoke(app, ["db", "ls"], env={variable: value, "BENANZA_DB": "sqlite:///unused.db"})
    assert done.exit_code == 2 and done.stderr.startswith(f"error: {variable}: ")
    assert "Traceback" not in done.output
    assert CliRunner().invoke(app, ["db", "ls", "--help"], env={variable: value}).exit_code == 0


def test_the_environment_is_read_once_by_the_command_and_handed_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``benanza db ls`` opens the database that the command's settings name, at its start."""
    db = tmp_path / "env.db"
    with open_store(f"sqlite:///{db}", settings=default_settings()):
        pass
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["db", "ls", "--format", "json"], env={"BENANZA_DB": f"sqlite:///{db}"})
    assert done.exit_code == 0, done.output
    assert not (tmp_path / "benanza.db").exists()  # the default was not what it opened
    done = CliRunner().invoke(app, ["db", "ls"], env={"BENANZA_DB": "sqlite:///nowhere/missing.db"})
    assert done.exit_code == 2 and "missing.db" in done.stderr


def test_settings_travel_to_workers() -> None:
    """The fleet driver hands its settings to Ray actors: they pickle, and compare equal after."""
    settings = load_settings({"BENANZA_SPILL_DIR": "/x", "BENANZA_HARNESS_MAX_TIME_S": "0.5"})
    again = pickle.loads(pickle.dumps(settings))
    assert again == settings and again.harness.model_fields_set == {"max_time_s"}
    secret = load_settings({"BENANZA_DB": "mongodb://alice:S3cr3t@db/perf"})
    assert secret.db and "S3cr3t" not in repr(secret) and "S3cr3t" not in str(secret)
    assert again.harness_settings().max_time_s == 0.5
    with pytest.raises(Exception, match="frozen"):
        settings.keep_repeats = 4  # type: ignore[misc]


def test_an_explicit_store_setting_beats_the_settings(tmp_path: Path) -> None:
    settings = load_settings({"BENANZA_KEEP_REPEATS": "2"})
    with open_store(f"sqlite:///{tmp_path / 'a.db'}", settings=settings) as store:
        assert store.kept_repeats == 2  # type: ignore[attr-defined]
    from benanza.store.sqlite import SqliteStore

    with SqliteStore(tmp_path / "b.db", kept_repeats=5, settings=settings) as store:
        assert store.kept_repeats == 5
    with SqliteStore(tmp_path / "c.db") as store:
        assert store.kept_repeats == 10  # no settings: the default, not this process's environment
