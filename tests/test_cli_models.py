"""The `benanza models ...` command contract, through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from benanza.cli import app

runner = CliRunner()


def _json(result) -> object:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_inspect_json_contract(zoo_path) -> None:
    out = _json(runner.invoke(app, ["models", "inspect", str(zoo_path("resnet50")), "--format", "json"]))
    assert out["model"] == "light_resnet50"
    assert out["shape_method"] == "onnx" and list(out["shaped_by"]) == ["onnx"]  # ONNX shape inference alone
    assert out["unique_layers"] == len({layer["layer_key"] for layer in out["layers"]})
    assert out["unsupported"] == []
    convs = [layer for layer in out["layers"] if layer["op_type"] == "Conv"]
    assert len(convs) == 53
    for layer in out["layers"]:
        assert {"name", "op_type", "layer_key", "input_shapes", "output_shapes", "attributes", "flops"} <= set(layer)
        assert all(isinstance(d, int) for shape in layer["output_shapes"] for d in shape)
    assert convs[0]["output_shapes"] == [[1, 64, 112, 112]]


def test_inspect_batch_and_table(zoo_path) -> None:
    out = _json(runner.invoke(app, ["models", "inspect", str(zoo_path("squeezenet")), "-b", "4", "-f", "json"]))
    assert out["layers"][-1]["output_shapes"][0][0] == 4
    table = runner.invoke(app, ["models", "inspect", str(zoo_path("squeezenet"))])
    assert table.exit_code == 0 and "Conv" in table.stdout and "layer key" in table.stdout


def test_dedup_json_contract_and_plot(zoo_path, tmp_path: Path) -> None:
    models = [str(zoo_path(n)) for n in ("bvlc_alexnet", "zfnet512", "vgg19")]
    png = tmp_path / "sim.png"
    out = _json(runner.invoke(app, ["models", "dedup", *models, "--plot", str(png), "--format", "json"]))
    assert [m["model"] for m in out["models"]] == ["light_bvlc_alexnet", "light_zfnet512", "light_vgg19"]
    assert out["corpus"]["layers"] == sum(m["layers"] for m in out["models"])
    assert out["corpus"]["unique_layers"] <= sum(m["unique_layers"] for m in out["models"])
    assert len(out["jaccard"]) == 3 and all(out["jaccard"][i][i] == 1.0 for i in range(3))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dedup_folder_is_a_corpus(zoo_path, tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name in ("squeezenet", "bvlc_alexnet"):
        (folder / f"light_{name}.onnx").write_bytes(zoo_path(name).read_bytes())
    out = _json(runner.invoke(app, ["models", "dedup", str(folder), "--format", "json"]))
    assert len(out["models"]) == 2


def test_split_json_lists_written_files(zoo_path, tmp_path: Path) -> None:
    out = _json(
        runner.invoke(
            app, ["models", "split", str(zoo_path("squeezenet")), "-g", "3", "--out", str(tmp_path), "-f", "json"]
        )
    )
    assert out["granularity"] == 3
    assert sum(s["layers"] for s in out["sequences"]) == 66
    for seq in out["sequences"]:
        assert 1 <= seq["layers"] <= 3 and Path(seq["path"]).exists()
        onnx.checker.check_model(onnx.load(seq["path"]))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["models", "inspect", "/no/such/model.onnx"], "/no/such/model.onnx: no such file"),
        (["models", "dedup", "/no/such/model.onnx"], "no such file"),
        (["models", "inspect", "MODEL", "--shape", "nonsense"], "bad --shape"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args, needle, zoo_path) -> None:
    args = [str(zoo_path("squeezenet")) if a == "MODEL" else a for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert needle in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_not_onnx_file(tmp_path: Path) -> None:
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is not a model\n")
    result = runner.invoke(app, ["models", "inspect", str(bad)])
    assert result.exit_code == 2 and str(bad) in result.stderr and "not an ONNX model" in result.stderr
