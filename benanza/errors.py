"""The one error root of benanza.

Every failure a user can cause (a bad file, a bad flag, an unreachable database) is a
``BenanzaError``; the CLI turns it into a one-line message and a non-zero exit.

    BenanzaError
    +-- ModelError            a model file cannot be read, validated or bound
    |   +-- UnboundDimensionError   an input dimension is symbolic and was not given
    |   +-- CrashedModelError       processing it crashed the process earlier in the command (left out)
    +-- UsageError            a flag or argument is malformed (also a ValueError)
    +-- RegistryError         an unknown name was asked of a registry (also a KeyError)
    +-- SplitError            a layer range cannot be written as a runnable model
    +-- PlanningError         a runtime cannot say how it would execute a model (planned without it)
    +-- StoreError            the performance database cannot be opened, read or written
    +-- ConfigError           a fleet config file cannot be read or does not validate
    +-- GpuError              the GPU runtime cannot run here (no device, no driver, no cuDNN)
        +-- UnsupportedLayer  a layer the GPU libraries cannot run as asked (stored as skipped)
        +-- LibraryCallError  a CUDA, cuDNN or cuBLAS call returned an error status
"""

from __future__ import annotations


class BenanzaError(Exception):
    """Root of every user-facing benanza failure."""


class ModelError(BenanzaError):
    """A model file cannot be loaded, validated or prepared.

    The message always starts with the file it is about.
    """

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class UnboundDimensionError(ModelError):
    """An input has a symbolic dimension that no ``--batch``/``--shape`` bound."""


class CrashedModelError(ModelError):
    """Processing the model crashed the process earlier in this command (``benanza.crashes``): left out."""


class UsageError(BenanzaError, ValueError):
    """A command-line value or API argument is malformed."""


class RegistryError(BenanzaError, KeyError):
    """A registry was asked for a name it does not know; the message lists the known ones."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind, self.name, self.known = kind, name, sorted(known)
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(self.known) or 'none'}")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


def one_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type name."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


class SplitError(BenanzaError):
    """A layer range cannot form a runnable network (SplitModel falls back on it)."""


class PlanningError(BenanzaError):
    """A runtime cannot tell how it would execute a model (its fusion groups).

    Raised by a runtime's ``execution_groups``; planning then measures every layer alone and
    says so with ``reason`` (the message starts with the model's file).
    """

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class StoreError(BenanzaError):
    """The performance database cannot be opened, read or written.

    The message names the database (file or URI) and the reason in one line; a file that is
    not a benanza database is never modified.
    """


class ConfigError(BenanzaError):
    """A fleet or system configuration cannot be read or does not validate.

    The message is one line: the file, then the first problem and where it is in the file
    (``configs/x.toml: systems[1].threads: Input should be greater than 0``).
    """

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class GpuError(BenanzaError):
    """The GPU runtime cannot run here: no CUDA device, no driver, a library missing.

    The message says what is missing and how to install it, in one line.
    """


class UnsupportedLayer(GpuError):
    """A layer the GPU libraries cannot run as asked; the runtime stores it as skipped with the reason."""


class LibraryCallError(GpuError):
    """A CUDA, cuDNN or cuBLAS call returned an error status; the message names the call and the status."""

    def __init__(self, call: str, status: int | str, detail: str = "") -> None:
        self.call, self.status = call, status
        super().__init__(f"{call} failed: {status}{f' ({detail})' if detail else ''}")
