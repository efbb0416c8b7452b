"""A model's own input values, from files: ``--input NAME=FILE``.

Every model and benchmark is fed synthetic inputs (``run_values.input_fills``, random floats):
right for a kernel's cost, which does not depend on its values, and wrong where the values decide how
much work there is. A detector's boxes after ``NonZero`` and ``NonMaxSuppression`` number what its
image holds; a ``Range`` to a length input, a ``Reshape`` to an input's values, is shaped by what
the model is fed. Given the values it is run on, a model is processed and measured on them:

- each given input is bound to its array's shape (as ``--shape`` would) and its symbolic dimensions
  bind every other input that has them (as ``--dim`` would);
- the model's runs that shape what its data decides (``resolve``: the lengths by data, and a shape that
  a given input's values decide) and the small integers it computes (``run_values``: lengths and
  positions its layers carry by value) are fed these values;
- the model's end to end, at defaults and as exported, is fed them;
- a layer benchmarked alone is fed synthetic data, as always, at the lengths and values the model's
  run on the given inputs gave.

Files: ``NAME=FILE.npy`` (numpy), ``FILE.npz`` (numpy, one array per input, by name), ``[NAME=]FILE.pb``
(an ONNX ``TensorProto``, named by its own name unless NAME is given) and a folder of ``.pb`` files (the
ONNX model zoo's ``test_data_set_0``: its ``input_*.pb``). A given input is known by its file's path and
a digest of its values: a model spec carries both, a worker reads the file again and refuses it if its
values changed since the plan (``GivenInput.read``), and the model's key covers the digests
(``identity``): an end to end measured on given values is not one measured on synthetic ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from benanza.errors import BenanzaError, ModelError, UsageError, one_line

_EXAMPLE = "e.g. --input images=image.npy, --input inputs.npz or --input test_data_set_0"


@dataclass(frozen=True)
class GivenInput:
    """One input's values, read from ``path``; ``digest``: 16 hex digits of sha256 over its dtype, shape
    and bytes. ``named``: the flag named it (``NAME=FILE``, or a ``.pb`` file): a model without such an input
    is an error; an array of a ``.npz`` or a folder a model has no input of is left out (a tokenizer's
    ``token_type_ids`` for a model that takes none), and said."""

    name: str
    path: str
    digest: str
    array: np.ndarray = field(compare=False, repr=False)
    named: bool = True

    @classmethod
    def of(cls, name: str, path: str | Path, array: np.ndarray, named: bool = True) -> GivenInput:
        """The input ``name`` of ``array``, read from ``path``."""
        array = np.require(array, requirements="C")
        return cls(name, str(Path(path).resolve()), values_digest(array), array, named)

    @classmethod
    def read(cls, name: str, path: str, digest: str = "") -> GivenInput:
        """Input ``name`` read from ``path`` again (a spec's), refused where ``digest`` no longer matches.

        Raises:
            UsageError: the file cannot be read, holds no array ``name``, or its values are not those planned.
        """
        found = {given.name: given for given in read_input_file(path, name if _names_one(path) else None)}
        return _checked(found, name, path, digest)

    def described(self) -> str:
        """``1x3x224x224 float32 from /data/cat.npy (sha256 0123abcd...)``: how a note names it."""
        shape = "x".join(map(str, self.array.shape)) or "a scalar"
        return f"{shape} {self.array.dtype.name} from {self.path} (sha256 {self.digest})"

    def label(self) -> str:
        """``cat.npy@0123abcd``: its file's name and digest, as a stored plan names the workload."""
        return f"{Path(self.path).name}@{self.digest[:8]}"

    def to_doc(self) -> dict[str, str]:
        """What a model spec carries of it (``bench.spec.requested_binding``)."""
        return {"path": self.path, "digest": self.digest}


def _checked(found: Mapping[str, GivenInput], name: str, path: str, digest: str) -> GivenInput:
    """``found[name]``, refused where it is missing or its values are not those planned (``digest``)."""
    if name not in found:
        raise UsageError(f"{path}: holds no input '{name}' (it holds {', '.join(sorted(found)) or 'none'})")
    given = found[name]
    if digest and given.digest != digest:
        raise UsageError(
            f"{path}: input '{name}' holds other values than when the model was planned "
            f"(digest {given.digest}, planned {digest}); plan it again"
        )
    return given


def values_digest(array: np.ndarray) -> str:
    """16 hex digits of sha256 over an array's dtype, shape and bytes."""
    h = hashlib.sha256(f"{array.dtype.str}|{array.shape}|".encode())
    h.update(np.require(array, requirements="C").tobytes())
    return h.hexdigest()[:16]


def _names_one(path: str | Path) -> bool:
    """Whether a file holds one array that the flag names (``.npy``, ``.pb``), not arrays by name."""
    return Path(path).suffix.lower() in (".npy", ".pb") and not Path(path).is_dir()


def split_input_flag(text: str) -> tuple[str, str]:
    """``NAME=FILE`` -> (NAME, FILE); ``FILE`` -> ("", FILE) (a file whose own name holds ``=`` too).

    Raises:
        UsageError: ``=`` with nothing before or after it.
    """
    text = text.strip()
    name, sep, rest = text.partition("=")
    if not sep or Path(text).exists():
        return "", text
    if not name.strip() or not rest.strip():
        raise UsageError(f"bad --input {text!r}: expected NAME=FILE or FILE, {_EXAMPLE}")
    return name.strip(), rest.strip()


def parse_input_flag(text: str) -> list[GivenInput]:
    """Read ``--input``'s ``NAME=FILE`` or ``FILE`` into the inputs it gives (see the module docstring).

    Raises:
        UsageError: the text is malformed, the file cannot be read or holds no usable array (one line
            naming the file and the reason).
    """
    name, path = split_input_flag(text)
    if not Path(path).exists():
        raise UsageError(f"{path}: no such file (--input {text!r})")
    if name and not _names_one(path):
        raise UsageError(f"{path}: --input NAME=FILE takes a .npy or .pb file; a .npz or a folder names its inputs")
    if not name and Path(path).suffix.lower() == ".npy":
        raise UsageError(f"{path}: a .npy file holds one array without a name; pass --input NAME={path}")
    return read_input_file(path, name or None)


def read_input_file(path: str | Path, name: str | None = None, unnamed: str | None = None) -> list[GivenInput]:
    """The inputs ``path`` holds: a ``.npy`` (as ``name``), a ``.npz`` (by its names), a ``.pb`` (as ``name``
    or its own name, else ``unnamed``) or a folder of ``.pb`` files (``input_0.pb``, ``input_1.pb``...: an
    unnamed tensor, named ``unnamed``, is the model's runtime input at its file's position: ``positional``).

    Raises:
        UsageError: the file cannot be read or an array is not one a model is fed (one line naming the file).
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("input_*.pb"), key=_position) or sorted(p.glob("*.pb"))
        if not files:
            raise UsageError(f"{p}: the folder holds no .pb tensor files (as the ONNX model zoo's test_data_set_0)")
        # a tensor without a name (ONNX's pytorch-converted test data) is the model's input at its file's position
        return [
            replace(given, named=False)
            for i, f in enumerate(files)
            for given in read_input_file(f, None, positional(i))
        ]
    suffix = p.suffix.lower()
    try:
        if suffix == ".npy":
            arrays = {name or "": np.load(p, allow_pickle=False)}
        elif suffix == ".npz":
            with np.load(p, allow_pickle=False) as archive:
                arrays = {key: archive[key] for key in archive.files}
        elif suffix == ".pb":
            import onnx  # here: analysis reads the binding a plan names and never loads onnx
            from onnx import numpy_helper

            tensor = onnx.TensorProto()
            tensor.ParseFromString(p.read_bytes())
            if not (name or tensor.name or unnamed):
                raise UsageError(f"{p}: the tensor has no name; pass --input NAME={p}")
            arrays = {name or tensor.name or str(unnamed): numpy_helper.to_array(tensor)}
        else:
            raise UsageError(f"{p}: not an input file (.npy, .npz, .pb or a folder of .pb files); {_EXAMPLE}")
    except BenanzaError:
        raise
    except Exception as exc:  # OSError, numpy's ValueError, zipfile's BadZipFile, protobuf's DecodeError
        raise UsageError(f"{p}: cannot be read as {suffix[1:] or 'an input file'}: {one_line(exc)}") from None
    if not arrays:
        raise UsageError(f"{p}: holds no array")
    for key, array in arrays.items():
        if array.dtype.kind not in "biuf":
            raise UsageError(
                f"{p}: '{key}' is {array.dtype} data; given inputs are booleans, integers and float16/32/64 "
                "(no strings, bfloat16 or float8)"
            )
    return [GivenInput.of(key, p, array, named=suffix != ".npz") for key, array in arrays.items()]


_POSITION = "#"  # ``#0``: the model's first runtime input (a folder's unnamed ``input_0.pb``)


def positional(index: int) -> str:
    """The name a folder's unnamed tensor is given until a model is bound: its runtime input at ``index``."""
    return f"{_POSITION}{index}"


def by_position(given: Mapping[str, GivenInput], inputs: list[str], path: object) -> dict[str, GivenInput]:
    """``given`` with each positional name (``positional``) replaced by the name of the model input at that
    position among ``inputs`` (its runtime inputs, in order).

    Raises:
        ModelError: a position past the model's inputs.
    """
    out: dict[str, GivenInput] = {}
    for name, g in given.items():
        if name.startswith(_POSITION) and name[1:].isdigit():
            index = int(name[1:])
            if index >= len(inputs):
                raise ModelError(
                    path,
                    f"--input {g.path}: an unnamed tensor at position {index}, the model has {len(inputs)} input(s)",
                )
            name, g = inputs[index], replace(g, name=inputs[index])
        out[name] = g
    return out


def _position(path: Path) -> tuple[int, str]:
    """``input_10.pb`` after ``input_9.pb``."""
    digits = path.stem.rpartition("_")[2]
    return (int(digits) if digits.isdigit() else 1 << 30, path.name)


def parse_input_flags(texts: Iterable[str] | None) -> dict[str, GivenInput]:
    """``--input`` values by input name; an input given twice with other values is an error."""
    found: dict[str, GivenInput] = {}
    for text in texts or ():
        for given in parse_input_flag(text):
            if given.name in found and found[given.name].digest != given.digest:
                raise UsageError(
                    f"--input {given.name} is given twice: from {found[given.name].path} and from {given.path}"
                )
            found[given.name] = given
    return found


def given_from_docs(docs: Mapping[str, Mapping[str, Any]] | None) -> dict[str, GivenInput]:
    """The given inputs a model spec carries (``GivenInput.to_doc``), read again and checked: a ``.npz``
    that gives several once."""
    by_path: dict[str, list[tuple[str, str]]] = {}
    for name, doc in (docs or {}).items():
        by_path.setdefault(doc["path"], []).append((name, doc.get("digest", "")))
    out: dict[str, GivenInput] = {}
    for path, wanted in by_path.items():
        if _names_one(path):
            out.update((name, GivenInput.read(name, path, digest)) for name, digest in wanted)
            continue
        found = {g.name: g for g in read_input_file(path)}
        out.update((name, _checked(found, name, path, digest)) for name, digest in wanted)
    return out


def given_arrays(given: Mapping[str, GivenInput]) -> dict[str, np.ndarray]:
    """Input name -> its values."""
    return {name: g.array for name, g in given.items()}


def given_feeds(feeds: Mapping[str, np.ndarray], given: Mapping[str, GivenInput]) -> dict[str, np.ndarray]:
    """``feeds`` (synthetic: ``runtimes.onnxruntime.feeds_for``) with each input that is given its values
    fed them instead."""
    return {name: given[name].array if name in given else array for name, array in feeds.items()}


def missing_input_file(model: Mapping[str, Any]) -> str | None:
    """Why a model spec (``requested_binding``'s ``model``) cannot run here: a given input's file is not on
    this system (a fleet worker without it); None where every one is."""
    for doc in (model.get("inputs") or {}).values():
        if not Path(doc["path"]).exists():
            return f"input file not available on this system: {doc['path']} (--input)"
    return None
