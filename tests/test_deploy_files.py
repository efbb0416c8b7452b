"""cluster/ and deploy/ agree with configs/ and with the code they start.

Every YAML parses; each node type / worker group names a catalog system and carries exactly its
label and resource (checked also through Ray's own parsers); compose references existing files;
the scheduled commands are valid ``benanza fleet run`` invocations of shipped configs; MongoDB's
init script creates the store's identity index; no command line holds the database URI (it comes
from the environment or a secret file, and reaches the shipped config's ``${BENANZA_DB}``).
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest

from benanza.bench.records import IDENTITY_FIELDS
from benanza.config import SystemConfig, load_catalog, load_fleet_config
from benanza.store.uri import StoreURI

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parent.parent
CONFIGS, CLUSTER, DEPLOY = REPO / "configs", REPO / "cluster", REPO / "deploy"
YAML_FILES = sorted([*CLUSTER.glob("*.yaml"), *DEPLOY.glob("*.yml"), *DEPLOY.glob("*.yaml")])
# `benanza fleet run [CONFIG] [--models PATH]... [--batch N,...] [--shape NAME=DIMS]... [--db URI]
#  [--address RAY_ADDRESS] --format json` (issue 4's command contract)
FLEET_RUN_OPTIONS = {"--models", "--batch", "--shape", "--db", "--address", "--format"}
FORMATS = {"table", "json"}


def catalog() -> dict[str, SystemConfig]:
    systems: dict[str, SystemConfig] = {}
    for path in sorted((CONFIGS / "systems").glob("*.toml")):
        for system in load_catalog(path):
            assert system.name not in systems, f"{system.name} defined twice in configs/systems"
            systems[system.name] = system
    return systems


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def ray_resources_param(text: str) -> dict[str, Any]:
    """A KubeRay ``rayStartParams.resources`` value: a quoted JSON string with escaped quotes."""
    assert text.startswith('"') and text.endswith('"'), text
    return json.loads(text[1:-1].replace("\\", ""))


def fleet_run_args(argv: list[str], config_root: str) -> dict[str, Any]:
    """Check ``argv`` is ``benanza fleet run [CONFIG] OPTIONS``; return the config file and options.

    ``config_root`` is where the deployment puts ``configs/`` (``/configs``, ``/etc/benanza``);
    the config it names must be a shipped one, and it must load.
    """
    assert Path(argv[0]).name == "benanza" and argv[1:3] == ["fleet", "run"], argv
    rest, options, positional = argv[3:], {}, []
    while rest:
        word = rest.pop(0)
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            assert name in FLEET_RUN_OPTIONS, f"{name} is not an option of benanza fleet run"
            options[name] = value if eq else rest.pop(0)
        else:
            positional.append(word)
    assert len(positional) == 1, f"one CONFIG expected, got {positional}"
    assert positional[0].startswith(config_root + "/"), positional
    shipped = CONFIGS / positional[0].removeprefix(config_root + "/")
    load_fleet_config(shipped, environ={})  # raises ConfigError when it is not a valid shipped config
    if "--format" in options:
        assert options["--format"] in FORMATS
    _parse_with_the_cli([str(shipped) if a == positional[0] else a for a in argv[3:]])
    return {"config": shipped, **options}


def _parse_with_the_cli(args: list[str]) -> None:
    """Where the ``fleet`` sub-app exists, let its own parser check ``run``'s options and values."""
    import typer

    from benanza.cli import app

    group = typer.main.get_command(app)
    fleet = getattr(group, "commands", {}).get("fleet")
    run = getattr(fleet, "commands", {}).get("run") if fleet is not None else None
    if run is None:
        return  # the command-contract check above stands in until `benanza fleet` exists
    names = {opt for param in run.params for opt in getattr(param, "opts", ())}
    assert {a.partition("=")[0] for a in args if a.startswith("--")} <= names
    # Placeholders for values only known where the command runs ($(BENANZA_DB), ${BENANZA_DB}).
    concrete = [re.sub(r"^\$[({]\w+[)}]$", "mongodb://placeholder/benanza", a) for a in args]
    run.make_context("run", concrete).close()  # a bad option or value raises click.UsageError


# --- every YAML parses ------------------------------------------------------------------------


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_yaml_parses(path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert documents and all(isinstance(d, dict) for d in documents)


def test_the_expected_files_are_there() -> None:
    names = {p.name for p in [*CLUSTER.iterdir(), *DEPLOY.iterdir()]}
    expected = {
        "ray-cluster.yaml",
        "kuberay-raycluster.yaml",
        "docker-compose.yml",
        "Dockerfile",
        "mongo-init.js",
        ".env.example",
        "k8s-cronjob.yaml",
        "k8s-regressions-cronjob.yaml",
        "benanza-fleet.service",
        "benanza-fleet.timer",
        "README.md",
    }
    assert expected <= names
    assert not {".gitkeep"} & names


# --- cluster/: one node type / worker group per system, with its label and resource -------------


def test_ray_cluster_launcher_config_validates_and_pins_each_system() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = load_yaml(CLUSTER / "ray-cluster.yaml")
    validate_config(prepare_config(config))  # Ray's own schema (node type labels included)
    systems = catalog()
    node_types = config["available_node_types"]
    head = config["head_node_type"]
    assert not node_types[head].get("labels") and not any(
        r.startswith("system:") for r in node_types[head]["resources"]
    )
    workers = {name: spec for name, spec in node_types.items() if name != head}
    assert workers
    for name, spec in workers.items():
        assert name in systems, f"node type {name} is not a system of configs/systems"
        assert spec["labels"] == systems[name].label_selector()
        assert spec["resources"][systems[name].resource_name()] == 1
        assert [r for r in spec["resources"] if r.startswith("system:")] == [systems[name].resource_name()]


def test_kuberay_cluster_groups_pin_each_system() -> None:
    manifest = load_yaml(CLUSTER / "kuberay-raycluster.yaml")
    assert (manifest["apiVersion"], manifest["kind"]) == ("ray.io/v1", "RayCluster")
    systems = catalog()
    head = manifest["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0", "no benchmark actor on the head"
    groups = manifest["spec"]["workerGroupSpecs"]
    assert len({g["groupName"] for g in groups}) == len(groups)
    for group in groups:
        name = group["groupName"]
        system = systems[name]
        assert group["labels"] == system.label_selector()
        assert "labels" not in group["rayStartParams"], "KubeRay rejects labels in rayStartParams"
        assert ray_resources_param(group["rayStartParams"]["resources"]) == {system.resource_name(): 1}
        pod = group["template"]["spec"]
        limits = pod["containers"][0]["resources"]["limits"]
        if system.kind == "gpu":
            assert limits["nvidia.com/gpu"] == 1, "one Ray node (one actor) per GPU"
            assert pod["nodeSelector"]["nvidia.com/gpu.product"]
        else:
            assert "nvidia.com/gpu" not in limits
            assert float(limits["cpu"]) >= system.num_cpus


def test_kuberay_cluster_reads_the_same_through_rays_autoscaler() -> None:
    parser = pytest.importorskip("ray.autoscaler._private.kuberay.autoscaling_config")
    systems = catalog()
    derived = parser._derive_autoscaling_config_from_ray_cr(load_yaml(CLUSTER / "kuberay-raycluster.yaml"))
    workers = {n: t for n, t in derived["available_node_types"].items() if n != "headgroup"}
    for name, node_type in workers.items():
        assert node_type["labels"] == systems[name].label_selector()
        assert node_type["resources"][systems[name].resource_name()] == 1
        assert node_type["resources"].get("GPU", 0) == (1 if systems[name].kind == "gpu" else 0)


def test_every_system_of_the_example_fleet_has_nodes_in_both_cluster_files() -> None:
    fleet = load_fleet_config(CONFIGS / "gpu-fleet.toml", environ={})
    launcher = set(load_yaml(CLUSTER / "ray-cluster.yaml")["available_node_types"])
    kuberay = {g["groupName"] for g in load_yaml(CLUSTER / "kuberay-raycluster.yaml")["spec"]["workerGroupSpecs"]}
    assert set(fleet.system_names()) <= launcher
    assert set(fleet.system_names()) <= kuberay
    assert launcher - {"head"} == kuberay, "both cluster files offer the same systems"


# --- deploy/: compose, image, MongoDB init ---------------------------------------------------------


def compose() -> dict[str, Any]:
    return load_yaml(DEPLOY / "docker-compose.yml")


def test_compose_references_existing_files() -> None:
    services = compose()["services"]
    for name, service in services.items():
        build = service.get("build")
        if build:
            context = (DEPLOY / build["context"]).resolve()
            assert context == REPO, name
            assert (context / build["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (DEPLOY / source).exists(), f"{name}: {source}"
    assert {"mongo", "ray-head", "benanza"} <= set(services)
    assert services["mongo"]["environment"]["MONGO_INITDB_ROOT_PASSWORD"].startswith("${"), "auth on, secret from .env"


def test_compose_variables_are_all_in_the_env_example() -> None:
    text = (DEPLOY / "docker-compose.yml").read_text()
    used = set(re.findall(r"\$\{(\w+)", text))
    example = {
        line.partition("=")[0]
        for line in (DEPLOY / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert used and used <= example


def test_every_compose_ray_process_needs_the_token_from_the_env_file() -> None:
    services = compose()["services"]
    ray_services = [name for name in services if name.startswith("ray-") or name == "benanza"]
    assert len(ray_services) >= 3
    for name in ray_services:
        env = services[name]["environment"]
        assert env["RAY_AUTH_MODE"] == "token", name
        assert re.fullmatch(r"\$\{RAY_AUTH_TOKEN:\?[^}]*\}", env["RAY_AUTH_TOKEN"]), name


def test_compose_workers_carry_the_local_fleets_systems() -> None:
    from ray._private.label_utils import parse_node_labels_string

    fleet = load_fleet_config(CONFIGS / "local-fleet.toml", environ={})
    found: dict[str, dict[str, Any]] = {}
    for name, service in compose()["services"].items():
        command = service.get("command") or []
        if command[:2] != ["ray", "start"] or "--head" in command:
            continue
        args = dict(a.partition("=")[::2] for a in command[2:] if a.startswith("--"))
        labels = parse_node_labels_string(args["--labels"])
        resources = json.loads(args["--resources"])
        system = fleet.system(labels["system"])
        assert resources == {system.resource_name(): 1}, name
        assert float(args["--num-cpus"]) >= system.num_cpus, name
        assert system.resource_name() in service["healthcheck"]["test"][-1], "healthy = registered with its resource"
        found[system.name] = service
    assert sorted(found) == sorted(fleet.system_names())


def test_compose_driver_runs_the_local_fleet_against_the_compose_cluster_and_mongo() -> None:
    service = compose()["services"]["benanza"]
    options = fleet_run_args(service["command"], "/configs")
    assert options["config"] == CONFIGS / "local-fleet.toml"
    assert options["--address"] == "ray-head:6379"
    assert "--db" not in options, "the URI comes from the environment, never the command line"
    uri = service["environment"]["BENANZA_DB"]
    assert re.fullmatch(r"mongodb://\$\{\w+\}:\$\{\w+\}@mongo:27017/benanza\?authSource=benanza", uri)
    concrete = re.sub(r"\$\{\w+\}", "x", uri)  # what compose passes once it has read deploy/.env
    assert load_fleet_config(options["config"], environ={"BENANZA_DB": concrete}).db == StoreURI(concrete)
    assert service["environment"]["RAY_USAGE_STATS_ENABLED"] == "0", "the Ray settings are kept"
    assert {d for d, c in service["depends_on"].items() if c["condition"] == "service_healthy"} >= {"mongo"}


def test_dockerfile_builds_from_python_slim_with_the_fleet_extra() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    assert re.search(r"^ARG EXTRAS=fleet$", text, re.M) and 'pip install ".[${EXTRAS}]"' in text
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "fleet" in extras
    for sources in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for source in sources.split():
            assert (REPO / source).exists(), f"COPY {source}: no such file in the build context"


def mongo_indexes() -> dict[str, tuple[str, list[str], bool]]:
    """``name -> (collection, fields, unique)`` of every createIndex call in mongo-init.js."""
    text = (DEPLOY / "mongo-init.js").read_text()
    calls = re.findall(r"\.(\w+)\.createIndex\(\s*\{([^}]*)\},\s*\{([^}]*)\}", text)
    indexes = {}
    for collection, keys, options in calls:
        fields = re.findall(r"(\w+)\s*:\s*1\b", keys)
        name = re.search(r"name:\s*\"(\w+)\"", options)[1]
        unique = re.search(r"unique:\s*(true|false)", options)[1] == "true"
        indexes[name] = (collection, fields, unique)
    return indexes


def test_mongo_init_creates_the_unique_identity_index() -> None:
    indexes = mongo_indexes()
    identity = [spec for spec in indexes.values() if spec[0] == "results" and spec[2]]
    assert identity == [("results", list(IDENTITY_FIELDS), True)]


def test_mongo_init_indexes_are_the_stores_own() -> None:
    pytest.importorskip("pymongo")
    from benanza.store.mongo import INDEXES

    expected = {
        name: (collection, fields, unique) for collection, specs in INDEXES.items() for name, fields, unique in specs
    }
    assert mongo_indexes() == expected


def test_mongo_init_takes_credentials_from_the_environment() -> None:
    text = (DEPLOY / "mongo-init.js").read_text()
    assert "process.env.BENANZA_MONGO_USER" in text and "process.env.BENANZA_MONGO_PASSWORD" in text
    assert re.search(r'role:\s*"readWrite"', text)
    services = compose()["services"]
    assert {"BENANZA_MONGO_USER", "BENANZA_MONGO_PASSWORD"} <= set(services["mongo"]["environment"])


# --- scheduled re-benchmarking ---------------------------------------------------------------------


def test_cronjob_runs_the_fleet_nightly_with_the_database_from_a_secret() -> None:
    documents = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "k8s-cronjob.yaml").read_text())}
    cronjob = documents["CronJob"]
    assert cronjob["apiVersion"] == "batch/v1" and len(cronjob["spec"]["schedule"].split()) == 5
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    options = fleet_run_args(container["command"] + container["args"], "/configs")
    assert "--db" not in options, "the URI comes from the Secret, never the command line"
    env = {e["name"]: e for e in container["env"]}
    assert "BENANZA_DB" not in env, "not even the environment: the Secret is mounted as a file"
    uri_file = Path(env["BENANZA_DB_FILE"]["value"])
    (mount,) = [m for m in container["volumeMounts"] if uri_file.parent == Path(m["mountPath"])]
    assert mount["readOnly"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] and uri_file.name == "uri", "the Secret's key `uri` is the file"
    assert volume["secret"]["defaultMode"] & 0o007 == 0, "not readable by others"
    raycluster = load_yaml(CLUSTER / "kuberay-raycluster.yaml")["metadata"]
    head_service = f"{raycluster['name']}-head-svc.{raycluster['namespace']}.svc.cluster.local"
    assert options["--address"] == f"ray://{head_service}:10001"
    claim = documents["PersistentVolumeClaim"]["metadata"]["name"]
    assert {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v} == {claim}
    assert container["workingDir"] in {m["mountPath"] for m in container["volumeMounts"]}, "spill files persist"


def systemd_unit(path: Path) -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
        else:
            key, _, value = line.partition("=")
            assert current is not None, line
            current[key] = value
    return sections


def test_systemd_service_and_timer_run_the_fleet_nightly() -> None:
    service = systemd_unit(DEPLOY / "benanza-fleet.service")
    assert service["Service"]["Type"] == "oneshot"
    argv = shlex.split(service["Service"]["ExecStart"])
    assert Path(argv[0]).is_absolute()
    options = fleet_run_args(argv, "/etc/benanza")
    assert options["config"] == CONFIGS / "gpu-fleet.toml"
    assert "--db" not in options, "the URI comes from a credential file, never the command line"
    credential, _, source = service["Service"]["LoadCredential"].partition(":")
    assert source.startswith("/etc/benanza/")
    environment = dict(item.split("=", 1) for item in shlex.split(service["Service"]["Environment"]))
    assert environment["BENANZA_DB_FILE"] == f"%d/{credential}"  # %d: the service's credentials folder
    assert options["--address"] == "auto"
    assert "PrivateTmp" not in service["Service"], "--address auto reads /tmp/ray"
    timer = systemd_unit(DEPLOY / "benanza-fleet.timer")
    assert timer["Timer"]["Unit"] == "benanza-fleet.service"
    assert timer["Timer"]["OnCalendar"] and timer["Timer"]["Persistent"] == "true"
    assert timer["Install"]["WantedBy"] == "timers.target"


def _regressions_args(argv: list[str]) -> dict[str, str]:
    """Check ``argv`` is a valid ``benanza analyze regressions`` invocation (the CLI's own parser); its options."""
    import typer

    from benanza.cli import app

    assert Path(argv[0]).name == "benanza" and argv[1:3] == ["analyze", "regressions"], argv
    group = typer.main.get_command(app)
    command = group.commands["analyze"].commands["regressions"]  # type: ignore[attr-defined]
    command.make_context("regressions", list(argv[3:])).close()  # a bad option or value raises click.UsageError
    return dict(zip(argv[3::2], argv[4::2], strict=False))


def test_the_scheduled_runs_report_regressions_with_the_database_from_a_secret() -> None:
    service = systemd_unit(DEPLOY / "benanza-fleet.service")
    report = _regressions_args(shlex.split(service["Service"]["ExecStartPost"]))
    assert report["--system"] == "all" and "--db" not in report
    (cronjob,) = yaml.safe_load_all((DEPLOY / "k8s-regressions-cronjob.yaml").read_text())
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    options = _regressions_args(container["command"] + container["args"])
    assert options["--system"] == "all" and options["--fail-on"] == "regression" and "--db" not in options
    env = {e["name"]: e["value"] for e in container["env"]}
    assert "BENANZA_DB" not in env and Path(env["BENANZA_DB_FILE"]).name == "uri"
    (volume,) = pod["volumes"]
    assert volume["secret"]["secretName"] == "benanza-mongodb" and volume["secret"]["defaultMode"] & 0o007 == 0
    nightly = yaml.safe_load_all((DEPLOY / "k8s-cronjob.yaml").read_text())
    fleet = next(d for d in nightly if d["kind"] == "CronJob")
    assert int(cronjob["spec"]["schedule"].split()[1]) > int(fleet["spec"]["schedule"].split()[1])  # after it


def test_the_invocation_check_rejects_what_is_not_a_fleet_run() -> None:
    with pytest.raises(AssertionError):
        fleet_run_args(["benanza", "fleet", "run", "/configs/local-fleet.toml", "--dbs", "x"], "/configs")
    with pytest.raises(AssertionError):
        fleet_run_args(["benanza", "bench", "run", "/configs/local-fleet.toml"], "/configs")
    with pytest.raises(AssertionError):
        fleet_run_args(["benanza", "fleet", "run", "/configs/local-fleet.toml", "--format", "yaml"], "/configs")
    from benanza.errors import ConfigError

    with pytest.raises(ConfigError):
        fleet_run_args(["benanza", "fleet", "run", "/configs/missing.toml"], "/configs")


# --- the database URI never on a command line ------------------------------------------------------


def test_a_uri_file_named_by_benanza_db_file_reaches_the_shipped_configs(tmp_path: Path) -> None:
    """What the CronJob and the systemd unit rely on: ``${BENANZA_DB}`` reads ``$BENANZA_DB_FILE``."""
    uri = "mongodb://benanza:S3cr3t@mongo.example:27017/benanza?authSource=benanza"
    secret = tmp_path / "uri"
    secret.write_text(uri + "\n")
    for name in ("gpu-fleet.toml", "local-fleet.toml"):
        config = load_fleet_config(CONFIGS / name, environ={"BENANZA_DB_FILE": str(secret)})
        assert config.db == StoreURI(uri) and "S3cr3t" not in repr(config), name


def command_lines() -> dict[str, list[str]]:
    """Every command line the deployment files run, by where it is."""
    lines = {f"compose {n}": s.get("command") or [] for n, s in compose()["services"].items()}
    for document in yaml.safe_load_all((DEPLOY / "k8s-cronjob.yaml").read_text()):
        if document["kind"] == "CronJob":
            (container,) = document["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
            lines["cronjob"] = container["command"] + container["args"]
    lines["systemd"] = shlex.split(systemd_unit(DEPLOY / "benanza-fleet.service")["Service"]["ExecStart"])
    for path in (CLUSTER / "ray-cluster.yaml", DEPLOY / "README.md", REPO / "README.md"):
        for i, line in enumerate(path.read_text().splitlines()):
            if "benanza " in line and ("fleet run" in line or "ray exec" in line):
                lines[f"{path.name}:{i + 1}"] = shlex.split(line.lstrip("#").strip(), comments=True)
    return lines


def test_no_deployment_puts_the_database_uri_on_a_command_line() -> None:
    """A command line is world-readable (ps) and Ray keeps the driver's in its job table."""
    for where, argv in command_lines().items():
        text = " ".join(argv)
        assert "--db" not in argv and not any(a.startswith("--db=") for a in argv), f"{where}: {text}"
        assert not re.search(r"mongodb(\+srv)?://[^\s'\"]*:[^\s'\"]*@", text), f"{where}: a password in {text}"
