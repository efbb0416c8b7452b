"""Reading ONNX files: the model processor's only I/O.

Every failure becomes a ``ModelError`` that names the file and the reason in one line.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from benanza.errors import BenanzaError, ModelError, one_line

ONNX_SUFFIXES = (".onnx",)


def load_model(path: str | Path) -> onnx.ModelProto:
    """Load and validate one ONNX file, with its external data if it has any."""
    p = Path(path)
    if not p.exists():
        raise ModelError(p, "no such file")
    if p.is_dir():
        raise ModelError(p, "is a directory; pass .onnx files or use a folder as a corpus")
    try:
        model = onnx.load(str(p))
    except DecodeError as exc:
        raise ModelError(p, f"not an ONNX model (protobuf could not decode it: {one_line(exc)})") from None
    except FileNotFoundError as exc:
        raise ModelError(p, f"external data file missing: {one_line(exc)}") from None
    except onnx.checker.ValidationError as exc:  # onnx >= 1.17 checks external data paths on load
        raise ModelError(p, f"external data cannot be read: {one_line(exc)}") from None
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelError(p, f"cannot read: {one_line(exc)}") from None
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.output:
        raise ModelError(p, "not an ONNX model (no IR version or graph outputs; truncated or another format?)")
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise ModelError(p, f"invalid ONNX model: {one_line(exc)}") from None
    return model


def expand_model_paths(paths: list[str | Path]) -> list[Path]:
    """Files as given; a folder contributes its ``*.onnx`` files, sorted, recursively."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.suffix in ONNX_SUFFIXES and f.is_file())
            if not found:
                raise ModelError(p, "folder holds no .onnx files")
            out.extend(found)
        else:
            out.append(p)
    if not out:
        raise BenanzaError("no models given")
    return out
