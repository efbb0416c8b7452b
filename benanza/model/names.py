"""Model display names: a file's stem, qualified by its folders where the stem names another model.

Exporters of today name their files alike: onnxruntime-genai writes every model as
``<folder>/model.onnx``, Optimum as ``model.onnx`` or ``decoder_model_merged.onnx``, and the
Hub's ONNX repositories hold ``onnx/model.onnx``. A model's name is what tables, report pages
and ``--models`` selections go by, so two models must never share one: where a stem would
name a model other than one already named by it, the new model is named by the shortest
tail of its path that no other model has (``llama_int4/model``, ``bert/onnx/model``).

A model keeps the name it was first stored under: a stored model of the same key (the same
graph, wherever it lies now) or of the same file (re-exported since) gives its name, so that
history, comparisons and reports go on under it. Pure: the caller reads what the store knows
(``Store.model_names``) and writes the names into its plans.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath


@dataclass(frozen=True, slots=True)
class NamedModel:
    """A model under its display name: what a stored plan says of it, or a model being planned."""

    name: str
    model_key: str
    path: str  # the file as it was given, on the machine that planned it


def model_name(path: str | Path) -> str:
    """A file's own name for its model: its stem (``resnet50`` of ``models/resnet50.onnx``)."""
    return Path(path).stem


def files_named_apart(paths: Sequence[str | Path]) -> list[str]:
    """Names for model files looked at without a store (``benanza models dedup``, ``split``): one
    per file, apart from the others' (``distinct_names`` with the file standing for its key)."""
    return distinct_names([(str(p), _absolute(str(p))) for p in paths])


def same_file(a: str, b: str) -> bool:
    """Whether two paths as given name one file here: equal as written or once made absolute."""
    return a == b or _absolute(a) == _absolute(b)


def _absolute(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def _parts(path: str) -> tuple[str, ...]:
    """The folders and stem of ``path`` made absolute, without its root."""
    pure = PurePath(_absolute(path)).with_suffix("")
    return pure.parts[1:] if pure.anchor else pure.parts


def distinct_names(models: Sequence[tuple[str, str]], known: Iterable[NamedModel] = ()) -> list[str]:
    """A display name per model ``(path, model_key)``, in order, apart from every other model's.

    ``known``: the models already named (a store's). A model that one of them is (same key,
    or same file) takes its name; the others take their stem unless a known model or another
    of ``models`` in another file has it (or a known model's name ends in it: ``llama_int4/model``),
    else the shortest path tail that sets them apart.
    One file at several bindings (batch sizes: several keys) is one model under one name.
    """
    known = list(known)
    names: list[str | None] = []
    for path, key in models:
        match = next((k for k in known if k.model_key == key), None) or next(
            (k for k in known if same_file(k.path, path)), None
        )
        names.append(match.name if match is not None else None)
    taken = {k.name for k in known} | {n for n in names if n is not None}
    by_stem: dict[str, list[str]] = defaultdict(list)  # stem -> the unnamed files that have it
    for (path, _), name in zip(models, names, strict=True):
        if name is None and _absolute(path) not in by_stem[model_name(path)]:
            by_stem[model_name(path)].append(_absolute(path))
    chosen: dict[str, str] = {}  # absolute file -> name
    for stem, files in by_stem.items():
        # a stem that names another model already (``llama_int4/model``) is no name for a new one alone
        shared = len(files) > 1 or any(stem in (model_name(k.path), k.name.rsplit("/", 1)[-1]) for k in known)
        chosen.update(_apart(files, taken, shortest=2 if shared else 1))
        taken |= set(chosen.values())
    return [n if n is not None else chosen[_absolute(p)] for n, (p, _) in zip(names, models, strict=True)]


def _apart(files: Sequence[str], taken: set[str], shortest: int = 1) -> dict[str, str]:
    """Names for files of one stem: the shortest tail (same length for all, ``shortest`` parts at
    least) that neither repeats among them nor is ``taken``; a file whose whole path is not
    enough gets ``~2``, ``~3``..."""
    parts = {f: _parts(f) for f in files}
    for length in range(shortest, max(len(p) for p in parts.values()) + 1):
        tails = {f: "/".join(p[-length:]) for f, p in parts.items()}
        if len(set(tails.values())) == len(files) and not set(tails.values()) & taken:
            return tails
    names: dict[str, str] = {}
    for f in files:  # a path as long as a taken name's: rare (a file at the root), but never a shared name
        name, n = "/".join(parts[f]), 2
        while name in taken or name in names.values():
            name, n = f"{'/'.join(parts[f])}~{n}", n + 1
        names[f] = name
    return names
