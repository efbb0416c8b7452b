"""`benanza models ...`: inspect, dedup and split ONNX models."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from benanza.cli.common import (
    BatchesOpt,
    BenanzaGroup,
    DimOpt,
    FormatOpt,
    InputOpt,
    ModelsArg,
    ShapeOpt,
    ValueOpt,
    model_paths,
    one_batch,
    parse_count,
)
from benanza.model.corpus import summarize
from benanza.model.names import files_named_apart
from benanza.model.process import process_model
from benanza.model.request import BindingRequest
from benanza.model.subgraphs import find_model_subgraphs, make_out_folder, sequence_folder, write_sequences
from benanza.report.models import corpus_tables, inspect_tables
from benanza.report.output import OutputFormat, console, emit, table
from benanza.report.plots import similarity_heatmap

app = typer.Typer(
    cls=BenanzaGroup,
    help="Turn ONNX models into layers, find repeats, split into runnable sequences.",
    no_args_is_help=True,
)


@app.command()
def inspect(
    model: Annotated[Path, typer.Argument(help="an ONNX file")],
    batch: BatchesOpt = None,
    shape: ShapeOpt = None,
    dim: DimOpt = None,
    value: ValueOpt = None,
    input: InputOpt = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Every layer of one model with its key, shapes, attributes and FLOPs."""

    batch_size, request = one_batch(batch, "models inspect"), BindingRequest.parse(shape, dim, value, input)
    processed = process_model(model, batch_size, request)
    graph = processed.graph
    for note in processed.notes(request):
        print(f"note: {model}: {note}", file=sys.stderr)
    for warning in processed.warnings():
        print(f"warning: {model}: {warning}", file=sys.stderr)
    layers = [layer.to_dict() for layer in graph.layers]
    unsupported = [u.to_dict() for u in graph.unsupported]
    # CSV: the layers, then the nodes that are not layers (their own columns: node, reason)
    document = {
        **graph.summary(),
        "values": dict(processed.binding.values),
        "layers": layers,
        "unsupported": unsupported,
        "edges": [list(e) for e in graph.edges],
        "total_flops": sum(layer.flops or 0 for layer in graph.layers),
    }
    if not emit(format, document, layers + unsupported):
        console().print(inspect_tables(graph))


@app.command()
def dedup(
    models: ModelsArg = None,
    batch: BatchesOpt = None,
    shape: ShapeOpt = None,
    dim: DimOpt = None,
    value: ValueOpt = None,
    input: InputOpt = None,
    plot: Annotated[Path | None, typer.Option(help="save the Jaccard similarity heatmap as PNG")] = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Layer counts and unique layers per model and for the corpus, repeats, Jaccard similarity."""

    batch_size, request = one_batch(batch, "models dedup"), BindingRequest.parse(shape, dim, value, input)
    paths = model_paths(models)
    graphs = [
        process_model(p, batch_size, request).named(name).graph
        for p, name in zip(paths, files_named_apart(paths), strict=True)
    ]
    summary = summarize(graphs)
    if plot is not None:
        similarity_heatmap(summary, plot)
    document = {**summary.to_dict(), "unsupported": {g.model: [u.to_dict() for u in g.unsupported] for g in graphs}}
    # CSV: the JSON's ``models``, each with its row of the Jaccard matrix (``jaccard.MODEL``)
    names = [m.model for m in summary.models]
    rows = [
        {**doc, "jaccard": dict(zip(names, row, strict=True))}
        for doc, row in zip(document["models"], summary.jaccard, strict=True)
    ]
    if not emit(format, document, rows):
        console().print(corpus_tables(summary))


@app.command()
def split(
    models: ModelsArg = None,
    granularity: Annotated[
        str, typer.Option("--granularity", "-g", metavar="G", help="at most G layers per sequence")
    ] = "1",
    out: Annotated[
        Path, typer.Option(help="folder for the sequence models (one folder per model in it; nothing outside)")
    ] = Path("split-out"),
    batch: BatchesOpt = None,
    shape: ShapeOpt = None,
    dim: DimOpt = None,
    value: ValueOpt = None,
    input: InputOpt = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Split models into runnable layer sequences of at most G layers (DLBricks SplitModel)."""

    grain, batch_size = parse_count(granularity, "--granularity"), one_batch(batch, "models split")
    request = BindingRequest.parse(shape, dim, value, input)
    paths = model_paths(models)
    names = files_named_apart(paths)
    for name in names:  # every model's folder checked before anything is written
        sequence_folder(out, name)
    make_out_folder(out)
    written = []
    for path, name in zip(paths, names, strict=True):
        processed = process_model(path, batch_size, request).named(name)
        written.extend(write_sequences(processed, find_model_subgraphs(processed.graph, grain), out))
    unique = len({w.sequence_key for w in written})
    sequences = [w.to_dict() for w in written]
    if not emit(format, {"granularity": grain, "sequences": sequences, "unique_sequences": unique}, sequences):
        console().print(
            table(
                f"{len(written)} sequences ({unique} unique) of at most {grain} layers in {out}",
                ["model", ("#", "right"), ("layers", "right"), "sequence key", "file"],
                ((w.model, w.index, w.layers, w.sequence_key, str(w.path)) for w in written),
            )
        )
