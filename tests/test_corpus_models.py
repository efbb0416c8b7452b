"""The corpus of today's models in ``corpus/``: committed structure only, listed, and processed.

Every node of every corpus model is shaped at batch 1 and becomes a layer or is folded away, the
QOperator int8 models' ONNX Runtime contrib ops (``com.microsoft::QLinearAdd``...) included (a QDQ
model's weight ``DequantizeLinear``s are layers, copied per reader as ONNX Runtime does); ONNX Runtime
groups the layers of QDQ, QOperator and float16 graphs as it runs them.
``benchmarks/corpus_status.py`` reports the same per model, with timings.
The whole corpus benchmarked is asserted in ``test_corpus_end_to_end.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from benanza.bench.build import build_onnx
from benanza.bench.generate import plan_model
from benanza.model.graph import InputKind
from benanza.model.load import has_data, load_model, model_tensors, structure_only
from benanza.model.network import network_of
from benanza.model.process import process_model
from benanza.model.request import BindingRequest
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
MANIFEST = json.loads((CORPUS / "corpus.json").read_text())
BY_NAME = {e["name"]: e for e in MANIFEST}
THRESHOLD = 1024  # bytes: make_corpus.py ships larger tensors without data
FAMILIES = {
    "ResNet",
    "EfficientNet",
    "MobileNetV3",
    "ConvNeXt",
    "RegNet",
    "ViT",
    "DeiT",
    "Swin",
    "MobileViT",
    "BERT",
    "RoBERTa",
    "DistilBERT",
    "GPT-2",
    "T5",
    "BART",
    "Whisper",
    "DETR",
    "SegFormer",
}
VARIANTS = {"fp32", "int8_qdq", "int8_qop", "int8_dynamic", "fp16"}


def readme_models() -> list[str]:
    return re.findall(r"^\| `([^`]+)` \|", (CORPUS / "README.md").read_text(), re.M)


def test_the_committed_corpus_is_the_listed_one():
    files = sorted(p.stem for p in (CORPUS / "models").glob("*.onnx"))
    assert len(files) >= 40
    assert files == sorted(BY_NAME) == sorted(readme_models())
    assert {e["family"] for e in MANIFEST} >= FAMILIES
    assert {e["variant"] for e in MANIFEST} == VARIANTS
    resnets = {e["architecture"] for e in MANIFEST if e["family"] == "ResNet"}
    assert len(resnets) >= 4  # depths whose layers repeat across the family


def test_the_corpus_ships_no_weight_data():
    assert not list((CORPUS / "models").glob("*.data"))
    total = sum(p.stat().st_size for p in (CORPUS / "models").iterdir())
    assert total < 12 * 2**20, f"corpus/models holds {total / 2**20:.1f} MiB"  # 9.4 MiB for 53 models


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_a_corpus_model_loads_structure_only_and_processes_at_batch_1(name):
    entry = BY_NAME[name]
    path = CORPUS / entry["file"]
    model = load_model(path)
    assert structure_only(model) > 0
    for tensor in model_tensors(model):  # what is kept by value is small
        assert not has_data(tensor) or len(tensor.raw_data) <= THRESHOLD, tensor.name
    processed = process_model(path, 1, BindingRequest.parse(entry["shape_args"]), proto=model)
    graph = processed.graph
    assert graph.layers
    assert {t.name: list(t.shape) for t in graph.inputs} == entry["shapes_at_batch_1"]
    assert graph.unsupported == (), [(u.node, u.reason) for u in graph.unsupported[:3]]
    assert len(graph.layers) + graph.constant_nodes == len(processed.proto.graph.node)


@pytest.mark.parametrize("name", ["resnet18", "resnet18_int8_qop", "bert_fp16"])
def test_stripped_weights_are_synthesised_with_their_shapes_and_dtypes(name):
    """A layer's weights in the benchmark network are the stripped tensors' shapes and dtypes."""
    entry = BY_NAME[name]
    path = CORPUS / entry["file"]
    stripped = {t.name: (tuple(t.dims), t.data_type) for t in load_model(path).graph.initializer if not has_data(t)}
    graph = process_model(path, 1, BindingRequest.parse(entry["shape_args"])).graph
    checked = 0
    for layer in graph.layers:
        weights = [i for i in layer.inputs if i.kind is InputKind.WEIGHT and i.tensor.name in stripped]
        if not weights:
            continue
        _, network = network_of(graph, [layer.index])
        built = build_onnx(network)
        inits = {init.name: init for init in built.graph.initializer}
        node = built.graph.node[0]
        for pos, inp in enumerate(layer.inputs):
            if inp.kind is not InputKind.WEIGHT or inp.tensor.name not in stripped:
                continue
            init = inits[node.input[pos]]
            assert (tuple(init.dims), init.data_type) == stripped[inp.tensor.name]
            assert (
                has_data(init)
                and len(init.raw_data)
                == np.prod(init.dims) * np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize
            )
            checked += 1
    assert checked > 0


def corpus_plan(name: str):
    entry = BY_NAME[name]
    processed = process_model(CORPUS / entry["file"], 1, BindingRequest.parse(entry["shape_args"]))
    plan = plan_model(processed, OnnxRuntimeCPU(threads=1))
    assert plan.notes == ()  # grouped from ONNX Runtime's optimized graph, in layer order
    assert sorted(i for unit in plan.units for i in unit) == list(range(len(processed.graph.layers)))
    return processed.graph, [[processed.graph.layers[i].op_type for i in unit] for unit in plan.units]


def test_a_quantized_models_repeated_layers_are_one_benchmark_whatever_their_scales():
    """A QDQ BERT's encoder layers each have their own scales; their layers and units repeat all the same.

    With the scales in the key (before): 308 unique of its 403 QuantizeLinear layers, 476 of its
    546 units; now 99 and 302 (what still differs is a zero point, which stays a value).
    """
    entry = BY_NAME["bert_int8_qdq"]
    processed = process_model(CORPUS / entry["file"], 1, BindingRequest.parse(entry["shape_args"]))
    quants = [x for x in processed.graph.layers if x.op_type == "QuantizeLinear"]
    assert len({x.scale_values for x in quants}) > len(quants) / 2  # most have their own scale
    assert len({x.layer_key for x in quants}) < len(quants) / 3
    plan = plan_model(processed, OnnxRuntimeCPU(threads=1))
    assert len(set(plan.unit_keys)) < len(plan.unit_keys) * 0.6  # the fused units (DQ -> MatMul -> Q) too


def test_a_qoperator_model_runs_each_contrib_node_as_one_unit():
    graph, units = corpus_plan("resnet18_int8_qop")
    contrib = [layer.op_type for layer in graph.layers if layer.domain == "com.microsoft"]
    assert sorted(set(contrib)) == ["QGemm", "QLinearAdd", "QLinearGlobalAveragePool"]
    assert all(len(unit) == 1 for unit in units)  # ORT runs QOperator nodes as they are


def test_a_qdq_model_is_grouped_as_onnxruntime_fuses_it():
    _, units = corpus_plan("resnet18_int8_qdq")
    convs = [unit for unit in units if "Conv" in unit]
    assert len(convs) == 20
    # the input's, the int8 weight's and the int32 bias's DequantizeLinear -> Conv -> QuantizeLinear
    # run as one QLinearConv; a DequantizeLinear read by two Convs is copied per reader, as ORT does
    assert all(unit == ["DequantizeLinear"] * 3 + ["Conv", "QuantizeLinear"] for unit in convs)


def test_a_float16_model_is_not_planned_as_one_unit():
    """ORT runs float16 on the CPU in float32 under renamed tensors; they map back to layers."""
    graph, units = corpus_plan("resnet50_fp16")
    assert len(units) > len(graph.layers) // 2
    assert max(len(unit) for unit in units) <= 3


def test_a_qdq_transformer_is_grouped_as_onnxruntime_fuses_it():
    """The query, key and value MatMuls share one DequantizeLinear; each runs as a QLinearMatMul."""
    _, units = corpus_plan("bert_int8_qdq")  # was planned each layer alone: units out of order
    matmuls = [unit for unit in units if "MatMul" in unit]
    # per encoder layer: query, key, value, attention out, two feed-forward, two attention products
    assert len(matmuls) == 8 * 12
    assert all(unit == ["DequantizeLinear", "DequantizeLinear", "MatMul", "QuantizeLinear"] for unit in matmuls)
