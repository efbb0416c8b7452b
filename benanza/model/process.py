"""The model processor's entry point: file -> bound, folded, shaped ``ModelGraph``."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from benanza.model.extract import extract
from benanza.model.graph import ModelGraph, ShapeReport
from benanza.model.load import load_model
from benanza.model.qdq import unique_dequantize
from benanza.model.shapes import Binding, prepare_model


@dataclass(frozen=True)
class ProcessedModel:
    """A model's layer graph and the prepared ONNX proto it was extracted from.

    The proto is kept for the stages that write ONNX again (runnable layer sequences,
    benchmarks); analysis only reads ``graph``.
    """

    graph: ModelGraph
    proto: onnx.ModelProto
    binding: Binding
    shapes: ShapeReport = field(default_factory=ShapeReport)  # how its tensors were shaped, why any was not


def model_name(path: str | Path) -> str:
    """A model's display name: the file stem, without the zoo's ``light_`` prefix kept off."""
    return Path(path).stem


def process_model(
    path: str | Path,
    batch: int | None = None,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    proto: onnx.ModelProto | None = None,
    *,
    fits_here: bool = True,
) -> ProcessedModel:
    """Load (unless ``proto`` is given), bind shapes, fold, infer and extract layers.

    ``fits_here``: the model is benchmarked on this machine, so an input larger than its
    memory is refused (``shapes.bind_shapes``); False where other systems run it.
    """
    with cycle_collection_paused():
        model = proto if proto is not None else load_model(path)
        prepared = prepare_model(model, path, batch, shapes, fits_here=fits_here)
        proto = unique_dequantize(prepared.proto)  # as ONNX Runtime arranges QDQ graphs to fuse them
        graph = extract(proto, model_name(path), str(path), prepared.shapes)
    return ProcessedModel(graph, proto, prepared.binding, prepared.shapes)


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while one model is processed, as it was after.

    Processing allocates hundreds of thousands of objects that live until the model is done
    (onnx_ir's copy of the graph for the optimizer, protobuf wrappers, layers), so the
    collector would run again and again, each full pass walking every live object, the models
    processed before included: a fifth of the corpus's processing time. Reference counting
    still frees what it can; the cycles left (onnx_ir's graph) go at the next collection.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
