"""``StoreURI`` and ``mask_uri``: a store URI shows no credentials, however it is written or used.

Masking is checked on URIs written right and wrong; where pymongo can parse a URI, its parser
must read the masked form as the same servers, database and options. The URI's sources
(``--db``, ``--db-file``, ``BENANZA_DB``, ``BENANZA_DB_FILE``) and the process title are
checked through the real command.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import benanza
from benanza.cli import app
from benanza.cli.store_options import hide_credentials_in_title, masked_argv
from benanza.config import FleetConfig, SystemConfig, load_fleet_config
from benanza.errors import ConfigError, StoreError, UsageError
from benanza.settings import load_settings
from benanza.store import open_store
from benanza.store.uri import MASK, StoreURI, mask_uri, resolve_store_uri

SECRET = "S3cr3t"

MASKED = [
    # written right: the user stays, the password goes
    ("mongodb://bench:s3cr%40t@db:27017/perf?tls=true", "mongodb://bench:***@db:27017/perf?tls=true"),
    ("mongodb+srv://u:S3cr3t@cluster0.example.net/", "mongodb+srv://u:***@cluster0.example.net/"),
    ("mongodb://u:S3cr3t@h1:1,h2:2,[::1]:3/db?replicaSet=rs", "mongodb://u:***@h1:1,h2:2,[::1]:3/db?replicaSet=rs"),
    ("mongodb://alice@db/perf", "mongodb://alice@db/perf"),
    ("mongodb://db:27017/perf", "mongodb://db:27017/perf"),
    ("mongodb://u:pa:ss@db/perf", "mongodb://u:***@db/perf"),
    # secrets in the options
    (
        "mongodb://db/p?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:S3cr3t",
        "mongodb://db/p?authMechanism=MONGODB-AWS&authMechanismProperties=***",
    ),
    (
        "mongodb://db/p?tls=true&tlsCertificateKeyFilePassword=S3cr3t&appname=x",
        "mongodb://db/p?tls=true&tlsCertificateKeyFilePassword=***&appname=x",
    ),
    ("mongodb://db/p?password=S3cr3t;Token=S3cr3t", "mongodb://db/p?password=***;Token=***"),
    ("mongodb://db/p?pass%77ord=S3cr3t", "mongodb://db/p?pass%77ord=***"),
    ("mongodb://u:S3cr3t@db/p#S3cr3t", "mongodb://u:***@db/p#***"),
    # written wrong: everything between :// and the last @ goes
    ("mongodb://alice:S3cr3t/x@y@db:27017/perf", "mongodb://***@db:27017/perf"),
    ("mongodb://alice:pa@S3cr3t@db/perf", "mongodb://***@db/perf"),
    ("mongodb://alice:S3cr3t?x@y@db/perf", "mongodb://***@db/perf"),
    ("mongodb://alice:S3cr3t#x@db/perf", "mongodb://***@db/perf"),
    ("mongodb://db/perf?appname=a@S3cr3t", "mongodb://***@S3cr3t"),  # unsure: the host part may be shown
    ("alice:S3cr3t@db/perf", "***@db/perf"),
    ("mongodb://alice:S3cr3t", "mongodb://alice:***"),  # the @host forgotten: the password read as a port
    ("mongodb://alice:S3cr3t/perf", "mongodb://alice:***/perf"),
    # SQLite names a file
    ("sqlite:///home/me@work/benanza.db", "sqlite:///home/me@work/benanza.db"),
    ("sqlite:////abs/x.db", "sqlite:////abs/x.db"),
    ("sqlite://alice:S3cr3t@/x.db", "sqlite://alice:***@/x.db"),
]


@pytest.mark.parametrize(("uri", "masked"), MASKED)
def test_mask_uri(uri: str, masked: str) -> None:
    assert mask_uri(uri) == masked
    shown = StoreURI(uri)
    assert str(shown) == f"{shown}" == shown.masked == masked and repr(shown) == f"StoreURI({masked!r})"
    assert shown.reveal() == uri


def test_the_password_is_in_no_form_of_the_value() -> None:
    uri = StoreURI("mongodb://alice:S3cr3t%2Fx@db:27017/perf")
    assert pickle.loads(pickle.dumps(uri)) == uri == copy.deepcopy(uri) and {uri: 1}[StoreURI(uri.reveal())] == 1
    shown = [str(uri), repr(uri), f"{uri:>60}", format(uri), json.dumps({"db": uri}, default=str), str([uri])]
    assert not [s for s in shown if SECRET in s]
    assert not hasattr(uri, "__dict__")  # no vars(), and not a dataclass that asdict() would dump
    with pytest.raises(AttributeError):
        uri.masked = "x"  # type: ignore[misc]
    config = FleetConfig(systems=[SystemConfig(name="a")], db="mongodb://alice:S3cr3t@db/perf")
    assert config.db == StoreURI("mongodb://alice:S3cr3t@db/perf")
    assert SECRET not in repr(config) and SECRET not in config.model_dump_json()
    assert config.model_dump()["db"] == config.db and config.with_overrides(batch_sizes=[2]).db == config.db


@pytest.mark.parametrize(
    "uri",
    [
        "mongodb://bench:s3cr%40t@db:27017/perf?tls=true&authSource=admin",
        "mongodb://u:S3cr3t@h1:1,h2:2/db?replicaSet=rs&readPreference=secondary",
        "mongodb://db/p?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:S3cr3t",
        "mongodb://u:S3cr3t@[::1]:27017/",
    ],
)
def test_pymongo_reads_the_masked_uri_as_the_same_servers_database_and_options(uri: str) -> None:
    """The masked form is a faithful picture: only the secret values differ."""
    uri_parser = pytest.importorskip("pymongo.uri_parser")
    raw = uri_parser.parse_uri(uri, validate=False, warn=False)
    shown = uri_parser.parse_uri(mask_uri(uri), validate=False, warn=False)
    assert shown["nodelist"] == raw["nodelist"] and shown["database"] == raw["database"]
    assert shown["username"] == raw["username"] and shown["password"] in (None, MASK)
    secret = {k for k in raw["options"] if "authmechanismproperties" in k.lower()}
    assert {k: v for k, v in shown["options"].items() if k not in secret} == {
        k: v for k, v in raw["options"].items() if k not in secret
    }


def test_redact_removes_what_a_parser_quotes_of_the_credentials() -> None:
    uri = StoreURI("mongodb://alice:S3cr3t/x@y@db:27017/perf")
    assert uri.redact("Port must be an integer: 'S3cr3t'") == "Port must be an integer: '***'"
    assert SECRET not in uri.redact(f"bad URI {uri.reveal()}") and "x@y" not in uri.redact("host x@y@db unknown")
    assert uri.redact("Connection refused") == "Connection refused"


def test_a_malformed_uri_error_names_the_store_masked_in_one_line() -> None:
    pytest.importorskip("pymongo")
    for uri in ("mongodb://alice:S3cr3t", "mongodb://alice:S3cr3t/x@y@127.0.0.1:1/p", "alice:S3cr3t@db/p"):
        with pytest.raises((StoreError, UsageError)) as info:
            open_store(uri)
        assert SECRET not in str(info.value) and "\n" not in str(info.value), str(info.value)
    with pytest.raises(UsageError, match=r"names no file") as info:
        open_store("sqlite://alice:S3cr3t@/x.db")
    assert SECRET not in str(info.value)


# -- where the URI comes from ----------------------------------------------------------------------------


def test_the_uri_comes_from_a_flag_a_file_or_the_environment(tmp_path: Path) -> None:
    secret = tmp_path / "db-uri"
    secret.write_text("  mongodb://alice:S3cr3t@db/perf \n")
    assert resolve_store_uri("sqlite:///a.db", settings=load_settings({})) == StoreURI("sqlite:///a.db")
    assert resolve_store_uri(None, secret, settings=load_settings({})) == StoreURI("mongodb://alice:S3cr3t@db/perf")
    assert (
        resolve_store_uri(settings=load_settings({"BENANZA_DB_FILE": str(secret)})).reveal()
        == "mongodb://alice:S3cr3t@db/perf"
    )
    assert resolve_store_uri(settings=load_settings({"BENANZA_DB": "sqlite:///e.db"})) == StoreURI("sqlite:///e.db")
    assert resolve_store_uri(settings=load_settings({})) == StoreURI("sqlite:///benanza.db")
    with pytest.raises(UsageError, match="not both"):
        resolve_store_uri("sqlite:///a.db", secret, settings=load_settings({}))
    with pytest.raises(UsageError, match="both BENANZA_DB and BENANZA_DB_FILE"):
        resolve_store_uri(settings=load_settings({"BENANZA_DB": "sqlite:///e.db", "BENANZA_DB_FILE": str(secret)}))
    empty, missing, several = tmp_path / "empty", tmp_path / "missing", tmp_path / "several"
    empty.write_text("\n")
    several.write_text("mongodb://alice:S3cr3t@db/a\nmongodb://alice:S3cr3t@db/b\n")
    for path, reason in ((empty, "is empty"), (missing, "cannot read"), (several, "several lines")):
        with pytest.raises(UsageError, match=reason) as info:
            resolve_store_uri(None, path, settings=load_settings({}))
        assert str(path) in str(info.value) and SECRET not in str(info.value)


def test_a_config_reads_a_variable_from_the_file_its_file_variable_names(tmp_path: Path) -> None:
    secret = tmp_path / "db-uri"
    secret.write_text("mongodb://alice:S3cr3t@db/perf\n")
    config = tmp_path / "fleet.toml"
    config.write_text('db = "${BENANZA_DB:-sqlite:///x.db}"\n[[systems]]\nname = "a"\n')
    loaded = load_fleet_config(config, environ={"BENANZA_DB_FILE": str(secret)})
    assert loaded.db == StoreURI("mongodb://alice:S3cr3t@db/perf")
    assert load_fleet_config(config, environ={}).db == StoreURI("sqlite:///x.db")
    with pytest.raises(ConfigError, match=r"BENANZA_DB_FILE=.*cannot read it"):
        load_fleet_config(config, environ={"BENANZA_DB_FILE": str(tmp_path / "missing")})


def invoke(*args: str, **env: str | None):
    return CliRunner().invoke(app, list(args), env={"BENANZA_DB": None, "BENANZA_DB_FILE": None, **env})


def test_every_command_that_takes_db_takes_db_file(tmp_path: Path) -> None:
    db = tmp_path / "perf.db"
    with open_store(f"sqlite:///{db}") as store:
        store.register_system("box", {"os": "linux"})
    secret = tmp_path / "db-uri"
    secret.write_text(f"sqlite:///{db}\n")
    listing = invoke("db", "ls", "--db-file", str(secret), "--format", "json")
    assert listing.exit_code == 0, listing.output
    assert json.loads(listing.stdout)["db"] == f"sqlite:///{db}"
    assert json.loads(invoke("db", "ls", "--format", "json", BENANZA_DB_FILE=str(secret)).stdout)["systems"]
    both = invoke("db", "ls", "--db", f"sqlite:///{db}", "--db-file", str(secret))
    assert both.exit_code == 2 and both.stderr.strip() == "error: give --db or --db-file, not both"
    import typer

    group = typer.main.get_command(app)
    takes_db = {
        f"{name} {sub}": {o for p in command.params for o in getattr(p, "opts", ())}
        for name, cmd in [("", group), *getattr(group, "commands", {}).items()]
        for sub, command in getattr(cmd, "commands", {name: cmd}).items()
    }
    with_db = {name for name, opts in takes_db.items() if "--db" in opts}
    assert {"db ls", "fleet run", "fleet status", "bench run", "analyze lower-bound"} <= with_db
    assert all("--db-file" in takes_db[name] for name in with_db), with_db


def test_masked_argv() -> None:
    argv = ["benanza", "db", "ls", "--db", "alice:S3cr3t@db/p", "--db=mongodb://a:S3cr3t@db/p", "x://a:S3cr3t@h"]
    assert masked_argv(argv) == ["benanza", "db", "ls", "--db", "***@db/p", "--db=mongodb://a:***@db/p", "x://a:***@h"]
    assert masked_argv(["benanza", "--db", "sqlite:///x.db"]) == ["benanza", "--db", "sqlite:///x.db"]
    assert not hide_credentials_in_title(["benanza", "db", "ls"])  # nothing to hide: the title is left alone


@pytest.mark.slow
def test_the_process_title_hides_a_password_given_with_db(tmp_path: Path) -> None:
    """``ps`` (``/proc/PID/cmdline``) shows the masked command line while the command runs."""
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("pymongo")
    uri = "mongodb://alice:S3cr3t@127.0.0.1:9/perf?serverSelectionTimeoutMS=4000"  # port 9: nobody answers
    env = {**os.environ, "PYTHONPATH": str(Path(benanza.__file__).parents[1]), "BENANZA_DB_RETRY_WINDOW_S": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "benanza", "db", "ls", "--db", uri],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    seen, name = "", ""
    children: set[str] = set()  # the command's work runs in a child of it (benanza.supervisor)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            process = psutil.Process(proc.pid)
            seen, name = " ".join(process.cmdline()), process.name()
            children |= {" ".join(c.cmdline()) for c in process.children()}
        except psutil.Error:
            break
        if MASK in seen and any(MASK in c for c in children):
            break
        time.sleep(0.02)
    out, err = proc.communicate(timeout=60)
    assert "mongodb://alice:***@127.0.0.1:9/perf" in seen, seen
    assert name.startswith("python"), f"the process name (top, pgrep) is kept: {name!r}"
    assert SECRET not in seen
    assert children and not any(SECRET in c for c in children), children
    assert proc.returncode == 2 and SECRET not in out + err and err.startswith("error: mongodb://alice:***@"), err
