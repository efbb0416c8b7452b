"""The model processor's entry point: file -> bound, folded, shaped ``ModelGraph``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx

from benanza.collector import collection_paused
from benanza.crashes import NativeCrash, native
from benanza.errors import CrashedModelError
from benanza.model.extract import extract
from benanza.model.graph import ModelGraph, ShapeReport
from benanza.model.load import load_model
from benanza.model.names import model_name
from benanza.model.qdq import unique_dequantize
from benanza.model.request import NO_REQUEST, BindingRequest
from benanza.model.shapes import Binding, prepare_model
from benanza.model.steering import branch_notes


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

    def notes(self, request: BindingRequest = NO_REQUEST) -> list[str]:
        """What processing decided that the layer tables do not show, for the record: the file each given input
        was fed from (``--input``), the branch an input chose (``steering.branch_notes``; ``request``: what was
        asked) and each length taken from the model's run (``ShapeReport.by_data``), named by the layer that
        makes it. What departs from what was asked is in ``warnings``."""
        producers = {
            o: node.name or f"{node.op_type}_{i}" for i, node in enumerate(self.proto.graph.node) for o in node.output
        }
        producers.update((t.name, layer.name) for layer in self.graph.layers for t in layer.outputs)
        return [
            *(f"input '{name}' fed {given.described()}" for name, given in self.binding.given.items()),
            *branch_notes(self.binding.values, {*request.values, *request.inputs}),
            *(f"{producers.get(t, t)}: output '{t}': {how}" for t, how in self.shapes.by_data),
        ]

    def warnings(self) -> list[str]:
        """Where the binding departs from what was asked or from the file: an input file's array that no input
        of the model takes (not fed), a given input whose leading dimension is not the batch size asked, and a
        fixed leading dimension other than 1 rewritten to the batch size asked (a detector exported for one
        ``3xHxW`` image has no batch dimension: ``--batch 1`` makes it one channel)."""
        return [
            *(f"{g.path} holds '{g.name}', no input of this model: not fed" for g in self.binding.not_inputs),
            *(
                f"input '{name}' is fed its file's leading dimension, {held}, not the batch size asked, {asked}"
                for name, (held, asked) in self.binding.unbatched.items()
            ),
            *(
                f"input '{name}': its file fixes its leading dimension at {old}, bound here to {new}, the batch size "
                f"asked (--batch); where that dimension is not a batch, "
                f"--shape {name}={'x'.join(map(str, (old, *self.binding.shapes[name][1:])))} binds the input as its "
                "file is (--batch would bind every input's leading dimension; --shape binds every model of a run: "
                "run this one alone)"
                for name, (old, new) in self.binding.rebatch.items()
                if old != 1  # a file exported at batch 1 is rebatched by design (--batch 8)
            ),
        ]

    def named(self, name: str) -> ProcessedModel:
        """This model shown as ``name`` (``benanza.model.names``: apart from others of its file's stem)."""
        return self if name == self.graph.model else replace(self, graph=replace(self.graph, model=name))


def process_model(
    path: str | Path,
    batch: int | None = None,
    request: BindingRequest = NO_REQUEST,
    proto: onnx.ModelProto | None = None,
    *,
    keep_branches: bool = False,
    fits_here: bool = True,
) -> ProcessedModel:
    """Load (unless ``proto`` is given), bind shapes, fold, infer and extract layers.

    The graph is named by the file's stem; a run names its models apart from the others it
    plans and the store holds (``bench.generate.with_distinct_names``).

    ``request``: input shapes, symbolic dimensions by name and inputs that choose an ``If``'s branch
    by value (``--shape``, ``--dim``, ``--value``: ``request.BindingRequest``), the ``If`` folded to
    the branch taken unless ``keep_branches`` (an end to end: ``shapes.prepare_model``).
    ``fits_here``: the model is benchmarked on this machine, so an input larger than its memory is
    refused; False where other systems run it (both: ``shapes.bind_shapes``).
    """
    # a crash of the process in here (ONNX's shape inference, ONNX Runtime) is survived (``benanza.crashes``):
    # the runs that find shapes say so when run again, a crash elsewhere is this model's error
    subject = f"{path}|batch={batch}|branches={keep_branches}"  # the request is the command's, one for all
    try:
        with collection_paused(), native("model", subject, str(path)):  # collection: see benanza.collector
            model = proto if proto is not None else load_model(path)
            prepared = prepare_model(model, path, batch, request, keep_branches=keep_branches, fits_here=fits_here)
            proto = unique_dequantize(prepared.proto)  # as ONNX Runtime arranges QDQ graphs to fuse them
            graph = extract(proto, model_name(path), str(path), prepared.shapes, prepared.binding.given)
    except NativeCrash as exc:
        raise CrashedModelError(path, f"processing it: {exc}") from None
    return ProcessedModel(graph, proto, prepared.binding, prepared.shapes)
