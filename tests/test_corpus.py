"""Corpus analysis: repeats within and across models, and pairwise Jaccard similarity."""

from __future__ import annotations

import json

import pytest

from benanza.model.corpus import CorpusSummary, jaccard, summarize
from benanza.model.graph import InputKind, Layer, LayerInput, ModelGraph, TensorSpec
from benanza.model.process import process_model

THREE = ("resnet50", "vgg19", "inception_v1")


@pytest.fixture(scope="module")
def three(zoo_model) -> tuple[list[ModelGraph], CorpusSummary]:
    graphs = [zoo_model(name, 1).graph for name in THREE]
    return graphs, summarize(graphs)


def test_per_model_counts(three):
    graphs, summary = three
    assert [(m.model, m.layers, m.unique_layers, m.unsupported) for m in summary.models] == [
        ("light_resnet50", 176, 56, 0),
        ("light_vgg19", 46, 26, 0),
        ("light_inception_v1", 143, 108, 0),
    ]
    assert summary.layers == sum(len(g.layers) for g in graphs) == 365


def test_corpus_unique_is_at_most_the_sum_of_model_uniques(three):
    graphs, summary = three
    assert summary.unique_layers <= sum(m.unique_layers for m in summary.models)
    assert summary.unique_layers == len(set().union(*(g.unique_layer_keys for g in graphs))) == 184
    assert summary.unique_layers < 56 + 26 + 108  # the models share layers (the 1000-way softmax)
    assert summary.unique_layers >= max(m.unique_layers for m in summary.models)


def test_jaccard_matrix(three):
    graphs, summary = three
    matrix = summary.jaccard
    n = len(graphs)
    assert len(matrix) == n and all(len(row) == n for row in matrix)
    for i in range(n):
        assert matrix[i][i] == 1.0
        for j in range(n):
            assert 0.0 <= matrix[i][j] <= 1.0
            assert matrix[i][j] == matrix[j][i]
            if i != j:
                a, b = graphs[i].unique_layer_keys, graphs[j].unique_layer_keys
                assert matrix[i][j] == pytest.approx(len(a & b) / len(a | b))
                assert 0.0 < matrix[i][j] < 0.1  # different networks share only a few layers
    assert matrix[0][1] == pytest.approx(4 / 78)  # ResNet-50 and VGG-19 share 4 of 78 keys


def test_same_file_twice_is_identical(zoo_path):
    first = process_model(zoo_path("squeezenet"), batch=1).graph
    second = process_model(zoo_path("squeezenet"), batch=1).graph
    summary = summarize([first, second])
    assert summary.jaccard == ((1.0, 1.0), (1.0, 1.0))
    assert summary.unique_layers == summary.models[0].unique_layers == 38
    assert summary.layers == 2 * 66


def test_other_batch_is_another_model(zoo_model):
    summary = summarize([zoo_model("vgg19", 1).graph, zoo_model("vgg19", 8).graph])
    assert summary.jaccard[0][1] == 0.0  # every layer's shapes carry the batch


def test_by_op_repeats(three):
    _, summary = three
    by_op = {o.op_type: o for o in summary.by_op}
    assert (by_op["Conv"].layers, by_op["Conv"].unique_layers) == (53 + 16 + 57, 81)
    assert by_op["Conv"].repeats == 126 - 81
    assert (by_op["Softmax"].layers, by_op["Softmax"].unique_layers, by_op["Softmax"].repeats) == (3, 1, 2)
    assert by_op["BatchNormalization"].layers == 53  # ResNet-50 only
    assert sum(o.layers for o in summary.by_op) == summary.layers
    assert sum(o.unique_layers for o in summary.by_op) == summary.unique_layers  # a key has one op
    assert all(o.repeats == o.layers - o.unique_layers >= 0 for o in summary.by_op)
    order = [(-o.layers, o.op_type) for o in summary.by_op]
    assert order == sorted(order)  # most layers first, then by name
    assert summary.by_op[0].op_type == "Conv"


def test_to_dict_is_json(three):
    _, summary = three
    doc = json.loads(json.dumps(summary.to_dict()))
    assert doc["corpus"] == {"layers": 365, "unique_layers": 184}
    assert [m["model"] for m in doc["models"]] == ["light_resnet50", "light_vgg19", "light_inception_v1"]
    assert doc["by_op"][0]["op_type"] == "Conv" and doc["by_op"][0]["repeats"] == 45
    assert doc["jaccard"][1][1] == 1.0


# ------------------------------------------------------------------ small, hand-built corpora


def hand_graph(name: str, keys: list[tuple[str, str, str]]) -> ModelGraph:
    """A chain of layers given as (op_type, domain, layer_key)."""
    x = TensorSpec("x", (1,), "float32")
    layers = tuple(
        Layer(i, f"{name}_{i}", op, domain, 1, (LayerInput(x, InputKind.ACTIVATION),), (x,), (), 1, 8, key)
        for i, (op, domain, key) in enumerate(keys)
    )
    return ModelGraph(name, f"{name}.onnx", {"": 17}, (x,), layers, tuple((i, i + 1) for i in range(len(layers) - 1)))


def test_jaccard_function():
    assert jaccard(set(), set()) == 1.0
    assert jaccard({"a"}, set()) == 0.0
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    assert jaccard({"a", "b"}, {"b", "a"}) == 1.0


def test_hand_built_corpus():
    a = hand_graph("a", [("Relu", "", "k1"), ("Relu", "", "k1"), ("Conv", "", "k2"), ("Foo", "com.x", "k3")])
    b = hand_graph("b", [("Relu", "", "k1"), ("Conv", "", "k4")])
    summary = summarize([a, b])
    assert [(m.layers, m.unique_layers) for m in summary.models] == [(4, 3), (2, 2)]
    assert (summary.layers, summary.unique_layers) == (6, 4)
    assert summary.jaccard == ((1.0, 0.25), (0.25, 1.0))
    assert [(o.op_type, o.layers, o.unique_layers, o.repeats) for o in summary.by_op] == [
        ("Relu", 3, 1, 2),
        ("Conv", 2, 2, 0),
        ("com.x::Foo", 1, 1, 0),
    ]


def test_empty_corpus_and_empty_model():
    empty = summarize([])
    assert (empty.models, empty.layers, empty.unique_layers, empty.by_op, empty.jaccard) == ((), 0, 0, (), ())
    nothing = hand_graph("nothing", [])
    one = summarize([nothing, hand_graph("r", [("Relu", "", "k")])])
    assert one.jaccard == ((1.0, 0.0), (0.0, 1.0))
    assert summarize([nothing, nothing]).jaccard == ((1.0, 1.0), (1.0, 1.0))
