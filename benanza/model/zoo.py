"""The default corpus: the model zoo topologies that ship inside the ``onnx`` wheel."""

from __future__ import annotations

from pathlib import Path

from benanza.errors import BenanzaError


def zoo_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def zoo_paths() -> list[Path]:
    """The nine ``light_*.onnx`` models (AlexNet ... ZFNet-512), sorted by name."""
    paths = sorted(zoo_dir().glob("light_*.onnx"))
    if not paths:
        raise BenanzaError(f"{zoo_dir()}: the onnx wheel ships no light_*.onnx models here")
    return paths
