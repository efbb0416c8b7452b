"""Fleet configuration: shipped configs, defaults, include/use catalogs, one-line errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from benanza.bench.harness import HarnessSettings
from benanza.config import (
    FleetConfig,
    RayConfig,
    SystemConfig,
    default_fleet_config,
    load_catalog,
    load_fleet_config,
)
from benanza.errors import BenanzaError, ConfigError, RegistryError, UsageError
from benanza.model.zoo import zoo_dir, zoo_paths
from benanza.settings import load_settings
from benanza.store.uri import StoreURI

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
PAPER_GPUS = {"k80", "m60", "p100", "p4", "v100", "t4", "rtx6000"}
CURRENT_GPUS = {"a100", "l4", "h100", "h200"}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def config_error(path: Path, **kwargs) -> str:
    """Load ``path`` expecting a ConfigError; its message, checked to be one line naming the file."""
    with pytest.raises(ConfigError) as info:
        load_fleet_config(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: "), message
    return message


# --- shipped configs ------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_fleet_config_loads(path: Path) -> None:
    config = load_fleet_config(path, environ={})
    assert config.systems
    assert config.source == path
    for system in config.systems:  # every used system comes out fully validated
        assert isinstance(system, SystemConfig)


@pytest.mark.parametrize("path", sorted((CONFIGS / "systems").glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_catalog_loads(path: Path) -> None:
    systems = load_catalog(path)
    assert systems
    assert all(s.description for s in systems), "every catalog system says what it is"


def test_shipped_catalogs_hold_the_papers_gpus_current_gpus_and_cpus() -> None:
    gpus = {s.name: s for s in load_catalog(CONFIGS / "systems" / "gpus.toml")}
    assert set(gpus) == PAPER_GPUS | CURRENT_GPUS
    for system in gpus.values():
        assert system.kind == "gpu"
        tensor_cores = system.name not in ("k80", "m60", "p100", "p4")  # compute capability 7.0 on
        assert system.runtimes == ["cudnn", *(["cudnn:tensor_cores=false"] if tensor_cores else []), "onnxruntime"]
        assert system.gpu and system.price_per_hour is not None and system.price_per_hour > 0
    cpus = load_catalog(CONFIGS / "systems" / "cpus.toml")
    assert {s.kind for s in cpus} == {"cpu"}
    assert {s.threads for s in cpus} >= {1, 8}
    assert all(s.num_cpus == s.threads for s in cpus), "each CPU actor reserves the cores it benchmarks on"


def test_local_fleet_simulates_three_cpu_systems_with_sqlite() -> None:
    config = load_fleet_config(CONFIGS / "local-fleet.toml", environ={})
    assert config.ray.local_cluster and config.ray.address is None
    assert config.system_names() == ["cpu-1t", "cpu-2t", "cpu-1t-b"]
    assert [s.threads for s in config.systems] == [1, 2, 1]
    assert {s.simulate_cpus for s in config.systems} == {1}
    assert config.db == StoreURI("sqlite:///benanza-fleet.db")
    assert config.batch_sizes == [1]
    assert config.models and all(p.parent == zoo_dir() and p.is_file() for p in config.models)
    assert config.system("cpu-2t").runtime_options("onnxruntime") == {"threads": 2}
    assert config.harness_settings(load_settings({})).max_time_s == 1.0


def test_gpu_fleet_uses_catalog_systems_and_reads_the_database_from_the_environment() -> None:
    path = CONFIGS / "gpu-fleet.toml"
    config = load_fleet_config(path, environ={})
    assert config.db == StoreURI("mongodb://localhost:27017/benanza")
    assert config.ray.address == "auto" and not config.ray.local_cluster
    assert {s.kind for s in config.systems} == {"gpu", "cpu"}
    uri = "mongodb://bench:secret@db.example:27017/benanza?authSource=benanza"
    assert load_fleet_config(path, environ={"BENANZA_DB": uri}).db == StoreURI(uri)


# --- defaults ---------------------------------------------------------------------------------


def test_defaults_are_this_machine_in_process_ray_default_db_and_the_zoo(monkeypatch) -> None:
    monkeypatch.setenv("BENANZA_SYSTEM", "bench-box.lab")
    config = default_fleet_config()
    (system,) = config.systems
    assert (system.name, system.kind, system.runtimes, system.placement) == (
        "bench-box.lab",
        "cpu",
        ["onnxruntime"],
        "both",
    )
    # the cores other processes leave free when the worker starts (host_cpu.free_cores)
    assert system.threads == "auto" and system.runtime_options("onnxruntime") == {"threads": "auto"}
    assert config.ray == RayConfig() and config.ray.address is None and not config.ray.local_cluster
    assert config.db is None and config.models == [] and config.batch_sizes is None and config.dtypes == ["float32"]
    assert config.model_paths() == zoo_paths()
    # the main job's settings, as `benanza run` has them
    assert config.granularities == [1, 3]
    assert config.harness_settings(load_settings({})) == HarnessSettings(min_time_s=0.02, max_time_s=0.5)
    assert config.harness_settings(load_settings({"BENANZA_HARNESS_MAX_TIME_S": "0.05"})).max_time_s == 0.05
    assert config.source is None


def test_defaults_refuse_a_system_name_ray_cannot_use(monkeypatch) -> None:
    monkeypatch.setenv("BENANZA_SYSTEM", "bad name!")
    with pytest.raises(ConfigError, match=r"^<embedded defaults>: name: .*set BENANZA_SYSTEM"):
        default_fleet_config()


def test_system_placement_and_runtime_options() -> None:
    system = SystemConfig(name="cpu-2t", threads=2, opt_level="all", simulate_cpus=2, num_cpus=2)
    assert system.label_selector() == {"system": "cpu-2t"}
    assert system.resource_name() == "system:cpu-2t"
    assert system.runtime_options("onnxruntime") == {"threads": 2, "opt_level": "all"}
    assert system.simulated_node() == {"num_cpus": 2, "resources": {"system:cpu-2t": 1}, "labels": {"system": "cpu-2t"}}
    with pytest.raises(UsageError, match="does not use runtime 'cudnn'"):
        system.runtime_options("cudnn")
    gpu = SystemConfig(name="h100", kind="gpu", runtimes=["cudnn", "onnxruntime"], devices=[0, 1], gpu="H100")
    assert gpu.runtime_options("cudnn") == {}  # no system-level options registered for it (yet)


def test_options_build_a_working_runtime() -> None:
    from benanza.runtimes.base import get_runtime

    system = SystemConfig(name="cpu-1t", threads=1, opt_level="basic")
    runtime = get_runtime("onnxruntime", **system.runtime_options("onnxruntime"))
    assert runtime.variant() == {"ep": "cpu", "opt": "basic", "threads": 1}


def test_fleet_lookup_by_system_name_lists_known_ones() -> None:
    config = FleetConfig(systems=[SystemConfig(name="a"), SystemConfig(name="b")])
    assert config.system("b").name == "b"
    with pytest.raises(RegistryError, match="unknown system 'c'; known: a, b"):
        config.system("c")


# --- include / use ----------------------------------------------------------------------------

CATALOG = """
[[systems]]
name = "t4"
kind = "gpu"
gpu = "T4"
runtimes = ["cudnn", "onnxruntime"]
price_per_hour = 0.5

[[systems]]
name = "h100"
kind = "gpu"
runtimes = ["cudnn"]
"""


def test_use_picks_catalog_systems_and_inline_systems_join_them(tmp_path: Path) -> None:
    write(tmp_path / "catalogs" / "gpus.toml", CATALOG)
    path = write(
        tmp_path / "fleet" / "nightly.toml",
        'include = ["../catalogs/gpus.toml"]\nuse = ["h100"]\n\n[[systems]]\nname = "cpu-4t"\nthreads = 4\n',
    )
    config = load_fleet_config(path)
    assert config.system_names() == ["cpu-4t", "h100"]  # inline first: locations match the file
    assert config.system("h100").kind == "gpu" and config.system("h100").runtimes == ["cudnn"]
    assert "t4" not in config.system_names(), "a catalog offers systems; only `use` picks them"


def test_unknown_use_lists_the_catalogs_systems(tmp_path: Path) -> None:
    write(tmp_path / "gpus.toml", CATALOG)
    path = write(tmp_path / "fleet.toml", 'include = ["gpus.toml"]\nuse = ["t4", "a100"]\n')
    assert config_error(path) == f"{path}: use[1]: unknown system 'a100'; known: h100, t4"
    bare = write(tmp_path / "bare.toml", 'use = ["t4"]\n')
    assert "use[0]: unknown system 't4'; known: none (no catalog is included)" in config_error(bare)


def test_include_errors_name_the_file_they_are_in(tmp_path: Path) -> None:
    path = write(tmp_path / "fleet.toml", 'include = ["missing.toml"]\nuse = ["t4"]\n')
    assert "include[0]: no such catalog file:" in config_error(path)

    bad = write(tmp_path / "bad.toml", '[[systems]]\nname = "t4"\nkind = "tpu"\n')
    path = write(tmp_path / "fleet2.toml", 'include = ["bad.toml"]\nuse = ["t4"]\n')
    with pytest.raises(ConfigError) as info:
        load_fleet_config(path)
    assert str(info.value).startswith(f"{bad}: systems[0].kind: Input should be 'cpu' or 'gpu', got 'tpu'")

    extra = write(tmp_path / "extra.toml", 'batch_sizes = [1]\n[[systems]]\nname = "x"\n')
    with pytest.raises(
        ConfigError, match=r"extra\.toml: a catalog holds only \[\[systems\]\] tables; found 'batch_sizes'"
    ):
        load_catalog(extra)


def test_a_system_defined_in_two_catalogs_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "a.toml", CATALOG)
    second = write(tmp_path / "b.toml", '[[systems]]\nname = "t4"\n')
    path = write(tmp_path / "fleet.toml", 'include = ["a.toml", "b.toml"]\nuse = ["t4"]\n')
    with pytest.raises(ConfigError) as info:
        load_fleet_config(path)
    assert str(info.value) == f"{second}: system 't4' is already defined in {tmp_path / 'a.toml'}"


# --- one-line errors ----------------------------------------------------------------------------

SYSTEM = '[[systems]]\nname = "a"\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[[systems]]\nname = "a"\n[[systems]]\nname = "b"\nthreads = 0\n',
            "systems[1].threads: should be a positive integer or 'auto', got 0",
        ),
        ('[[systems]]\nname = "a"\nthread = 2\n', "systems[0].thread: Extra inputs are not permitted"),
        (SYSTEM + "colour = 1\n", "systems[0].colour: Extra inputs are not permitted"),
        ('colour = "red"\n' + SYSTEM, "colour: Extra inputs are not permitted"),
        ("name = 'x'\n", "systems: no system; add [[systems]] tables, or include a catalog and `use` its systems"),
        ("systems = []\n", "systems: no system;"),
        ('[[systems]]\nname = "has space"\n', "systems[0].name: String should match pattern"),
        (
            '[[systems]]\nname = "trailing-"\n',
            "systems[0].name: system name 'trailing-' must end with a letter or digit",
        ),
        ('[[systems]]\nname = "a"\ndevices = [0]\n', "systems[0]: devices is for gpu systems; 'a' is kind cpu"),
        (
            '[[systems]]\nname = "a"\nopt_level = "max"\n',
            "systems[0]: unknown opt_level 'max'; known: disabled, basic, extended, all",
        ),
        ('[[systems]]\nname = "a"\nruntimes = ["null"]\nopt_level = "all"\n', "opt_level is an onnxruntime option"),
        ('[[systems]]\nname = "a"\nnum_cpus = 2\nsimulate_cpus = 1\n', "num_cpus 2 > simulate_cpus 1"),
        (
            '[[systems]]\nname = "a"\nprice_per_hour = -1\n',
            "systems[0].price_per_hour: Input should be greater than or equal to 0",
        ),
        ('[[systems]]\nname = "a"\n[[systems]]\nname = "a"\n', "systems: duplicate system name 'a'"),
        ("batch_sizes = [1, 0]\n" + SYSTEM, "batch_sizes[1]: Input should be greater than 0, got 0"),
        ('batch_sizes = "8"\n' + SYSTEM, "batch_sizes: Input should be a valid list"),
        ('shapes = ["images=1x3x224x224", "bad"]\n' + SYSTEM, "shapes[1]: expected NAME=DIMS"),
        ('dtypes = ["float33"]\n' + SYSTEM, "dtypes[0]: unknown dtype 'float33'; known:"),
        ('models = ["zoo:nonet"]\n' + SYSTEM, "models[0]: unknown zoo model 'nonet'; known: bvlc_alexnet, densenet121"),
        ('models = ["nowhere.onnx"]\n' + SYSTEM, "models[0]: no such model file or folder:"),
        ('db = "${BENANZA_TEST_UNSET_VAR}"\n' + SYSTEM, "db: environment variable BENANZA_TEST_UNSET_VAR is not set"),
        ("chunk_size = 0\n" + SYSTEM, "chunk_size: Input should be greater than 0"),
        (
            '[ray]\naddress = "auto"\nlocal_cluster = true\n' + SYSTEM,
            "ray: address and local_cluster exclude each other",
        ),
        ("[harness]\nmin_samples = 0\n" + SYSTEM, "harness: min_samples: Input should be greater than or equal to 1"),
        ("[harness]\nwarmups = 2\n" + SYSTEM, "harness: warmups: Extra inputs are not permitted"),
        ("[harness]\nmin_time_s = 5\nmax_time_s = 1\n" + SYSTEM, "harness: min_time_s 5.0 > max_time_s 1.0"),
        ('include = "gpus.toml"\n' + SYSTEM, "include: expected a list of strings"),
        ("systems = [\n", "invalid TOML: "),
        ('name = "a"\nname = "b"\n', "invalid TOML: Cannot overwrite a value (at line 2, column 11)"),
    ],
)
def test_each_problem_is_one_line_naming_file_location_and_reason(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path / "fleet.toml", text)
    assert expected in config_error(path, environ={})


def test_several_problems_report_the_first_and_count_the_rest(tmp_path: Path) -> None:
    path = write(tmp_path / "fleet.toml", 'chunk_size = 0\nlease_s = 0\n[[systems]]\nname = "a"\nthreads = -1\n')
    assert config_error(path).endswith("(and 2 more)")


def test_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    assert config_error(missing) == f"{missing}: no such file"
    assert config_error(tmp_path).endswith("is a folder, not a TOML file")
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b'name = "caf\xe9"\n')
    assert config_error(latin1).endswith("not UTF-8 text")


def test_config_error_is_a_benanza_error_that_keeps_file_and_reason(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(BenanzaError) as info:
        load_fleet_config(missing)
    assert isinstance(info.value, ConfigError)
    assert (info.value.path, info.value.reason) == (str(missing), "no such file")


# --- harness, models, environment, overrides -----------------------------------------------------


def test_harness_overrides_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path / "fleet.toml", "[harness]\nmax_time_s = 0.5\nmin_samples = 5\n" + SYSTEM)
    config = load_fleet_config(path)
    assert config.harness == {"max_time_s": 0.5, "min_samples": 5}
    settings = config.harness_settings(load_settings({}))
    assert (settings.max_time_s, settings.min_samples, settings.warmup_runs) == (0.5, 5, 3)
    env = {"BENANZA_HARNESS_MAX_TIME_S": "3"}
    assert config.harness_settings(load_settings(env)).max_time_s == 3.0
    assert config.harness_settings(load_settings(env), max_time_s=4.0).max_time_s == 4.0
    with pytest.raises(UsageError, match=r"BENANZA_HARNESS_MIN_SAMPLES: .*'zero'"):
        config.harness_settings(load_settings({"BENANZA_HARNESS_MIN_SAMPLES": "zero"}))
    with pytest.raises(UsageError, match="min_samples"):  # a value that only the file's makes inconsistent
        config.harness_settings(load_settings({"BENANZA_HARNESS_MAX_SAMPLES": "4"}))


def test_model_paths_are_relative_to_the_config_file(tmp_path: Path, monkeypatch, zoo_path) -> None:
    models = tmp_path / "project" / "models"
    models.mkdir(parents=True)
    shutil.copy(zoo_path("squeezenet"), models / "squeezenet.onnx")
    shutil.copy(zoo_path("zfnet512"), models / "zfnet.onnx")
    path = write(
        tmp_path / "project" / "configs" / "fleet.toml",
        'models = ["../models/squeezenet.onnx", "../models", "zoo:bvlc_alexnet"]\n' + SYSTEM,
    )
    monkeypatch.chdir(tmp_path)  # not the config's folder: paths must not depend on it
    config = load_fleet_config(path)
    assert config.models == [models / "squeezenet.onnx", models, zoo_path("bvlc_alexnet")]
    assert all(p.is_absolute() for p in config.models)
    assert config.model_paths() == [
        models / "squeezenet.onnx",
        models / "squeezenet.onnx",
        models / "zfnet.onnx",
        zoo_path("bvlc_alexnet"),
    ]


def test_shapes_and_dtypes(tmp_path: Path) -> None:
    path = write(tmp_path / "fleet.toml", 'shapes = ["images=1x3x224x224", "mask="]\ndtypes = ["float16"]\n' + SYSTEM)
    config = load_fleet_config(path)
    assert config.binding_request().shapes == {"images": (1, 3, 224, 224), "mask": ()}
    assert config.dtypes == ["float16"]


def test_environment_references_in_db_and_ray_address(tmp_path: Path) -> None:
    text = 'db = "${BENANZA_TEST_DB:-sqlite:///fallback.db}"\n[ray]\naddress = "${BENANZA_TEST_RAY}"\n' + SYSTEM
    path = write(tmp_path / "fleet.toml", text)
    config = load_fleet_config(path, environ={"BENANZA_TEST_RAY": "10.0.0.1:6379"})
    assert (config.db, config.ray.address) == (StoreURI("sqlite:///fallback.db"), "10.0.0.1:6379")
    env = {"BENANZA_TEST_RAY": "auto", "BENANZA_TEST_DB": "mongodb://h/db"}
    assert load_fleet_config(path, environ=env).db == StoreURI("mongodb://h/db")
    assert "ray.address: environment variable BENANZA_TEST_RAY is not set" in config_error(path, environ={})


def test_command_line_overrides_revalidate(tmp_path: Path, monkeypatch, zoo_path) -> None:
    config = load_fleet_config(CONFIGS / "local-fleet.toml", environ={})
    changed = config.with_overrides(address="ray-head:6379", db="mongodb://m/benanza", batch_sizes=[1, 8])
    assert changed.ray.address == "ray-head:6379" and not changed.ray.local_cluster
    assert (changed.db, changed.batch_sizes) == (StoreURI("mongodb://m/benanza"), [1, 8])
    assert changed.systems == config.systems and changed.models == config.models
    assert changed.source == config.source
    assert config.ray.local_cluster and config.batch_sizes == [1], "the original is unchanged"

    shutil.copy(zoo_path("squeezenet"), tmp_path / "m.onnx")
    monkeypatch.chdir(tmp_path)
    assert config.with_overrides(models=["m.onnx"]).models == [tmp_path / "m.onnx"]
    with pytest.raises(UsageError, match=r"^invalid override: batch_sizes\[0\]: Input should be greater than 0"):
        config.with_overrides(batch_sizes=[0])


def test_runtime_entries_carry_options_over_the_systems_settings() -> None:
    from benanza.config import runtime_entry

    assert runtime_entry("cudnn") == ("cudnn", {})
    assert runtime_entry("cudnn:precision=float16, tensor_cores=false") == (
        "cudnn",
        {"precision": "float16", "tensor_cores": False},
    )
    assert runtime_entry("onnxruntime:threads=4") == ("onnxruntime", {"threads": 4})
    entries = ["onnxruntime", "onnxruntime:threads=1", "cudnn:tensor_cores=false"]
    system = SystemConfig(name="h100", kind="gpu", threads=8, runtimes=entries)
    assert system.runtime_names() == ["onnxruntime", "cudnn"]
    assert system.runtime_options("onnxruntime") == {"ep": "cuda", "threads": 8}
    assert system.runtime_options("onnxruntime:threads=1") == {"ep": "cuda", "threads": 1}  # the entry wins
    assert system.runtime_options("cudnn:tensor_cores=false") == {"tensor_cores": False}
    with pytest.raises(UsageError, match="does not use runtime 'cudnn'"):
        system.runtime_options("cudnn")
    for bad in (":x=1", "cudnn:precision=float16,precision=float32", "cudnn:=1"):
        with pytest.raises(ValueError, match="runtime entry"):
            runtime_entry(bad)


def test_a_system_takes_a_thread_count_or_auto() -> None:
    assert SystemConfig(name="a", threads=4).runtime_options("onnxruntime") == {"threads": 4}
    assert SystemConfig(name="a", threads="auto").runtime_options("onnxruntime") == {"threads": "auto"}
    assert SystemConfig(name="a").runtime_options("onnxruntime") == {}  # every core
    for bad in (0, "fast", "2x"):
        with pytest.raises(ValidationError, match="threads"):
            SystemConfig(name="a", threads=bad)
