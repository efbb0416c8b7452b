"""Reproducing a regression: the one-unit ONNX model and the commands that measure it on each stack.

For every flagged layer or execution group of a regression report, ``write_repro`` writes
into a folder:

- ``<kind>_<key>.onnx``: the unit alone as a model, built by the generator's own builder
  (``bench/build.py``) from the network stored in the record's spec, so that ``bench run``
  on it measures the same layer or group key;
- ``commands.sh``: per stack, the software to install (the stack's library versions) and the
  exact ``benanza bench run`` command (runtime, threads, optimisation level, ... from the
  record's variant) that measures every such model into a database beside them;
- ``README.md``: what regressed, by how much, and how to run it.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from benanza.bench.build import build_onnx
from benanza.model.network import Network

REPRO_KINDS = ("layer", "group")
# how a variant entry is given to ``benanza bench run`` (True/False flags are spelled out)
_VARIANT_FLAGS = {"threads": "--threads", "opt": "--opt-level", "ep": "--ep", "precision": "--precision"}
# the stack entries that say what to install, in this order
_INSTALL = ("onnxruntime", "onnx", "numpy.version")


@dataclass(frozen=True, slots=True)
class ReproTarget:
    """A regressed unit to reproduce: what it is, how it was measured, how much it changed."""

    kind: str  # layer or group
    key: str
    label: str
    runtime: str
    variant: str  # canonical variant string of its record
    change: float  # relative, head / base - 1
    low: float  # interval of ``change``
    high: float
    network: Network | Mapping[str, Any]  # the record's spec network or its document (``bench/build.py`` builds it)


@dataclass(frozen=True, slots=True)
class ReproCase:
    """One regressed unit written as a model, with the command per stack."""

    target: ReproTarget
    model_file: Path
    commands: Mapping[str, str]  # stack id -> command

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.target.kind,
            "key": self.target.key,
            "label": self.target.label,
            "change": self.target.change,
            "model": str(self.model_file),
            "commands": dict(self.commands),
        }


def variant_flags(runtime: str, variant: str) -> list[str]:
    """``bench run`` flags that select a stored record's runtime and variant (``threads=1,opt=all``)."""
    flags = ["--runtime", runtime]
    for item in filter(None, variant.split(",")):
        name, _, value = item.partition("=")
        if name == "tensor_cores":
            flags.append("--tensor-cores" if value == "True" else "--no-tensor-cores")
        elif name in _VARIANT_FLAGS:
            flags += [_VARIANT_FLAGS[name], value]
    return flags


def install_line(stack: Mapping[str, Any]) -> str:
    """The ``pip install`` that reproduces a stack's Python libraries (the ones benanza fingerprints)."""

    def entry(path: str) -> Any:
        value: Any = stack
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return value

    pins = []
    for path in _INSTALL:
        version = entry(path)
        if isinstance(version, str):
            pins.append(f"{path.split('.')[0]}=={version}")
    return f"pip install {' '.join(pins)}" if pins else "# (no library versions in this stack's fingerprint)"


def write_repro(
    system: str,
    targets: Iterable[ReproTarget],
    stacks: Mapping[str, Mapping[str, Any]],
    folder: Path,
    *,
    stack_diff: Sequence[str] = (),
    db_name: str = "repro.db",
) -> list[ReproCase]:
    """Write ``targets`` as models, with the commands for each of ``stacks``, into ``folder``.

    Args:
        system: the system the regressions were found on (the commands measure as ``<system>-repro``).
        stacks: stack id -> fingerprint, base first: where to measure (one stack for a history).
        stack_diff: lines saying what differs between the stacks, for the README.
    """
    folder.mkdir(parents=True, exist_ok=True)
    db = f"sqlite:///{(folder / db_name).absolute()}"
    cases = []
    for target in targets:
        if target.kind not in REPRO_KINDS or not target.network:
            continue
        path = folder / f"{target.kind}_{target.key[:16]}.onnx"
        network = target.network if isinstance(target.network, Network) else Network.from_doc(target.network)
        onnx.save(build_onnx(network), path)
        flags = variant_flags(target.runtime, target.variant)
        args = ["benanza", "bench", "run", str(path.absolute()), *flags, "--system", f"{system}-repro", "--db", db]
        command = shlex.join([*args, "--e2e"])
        cases.append(ReproCase(target, path, {sid: command for sid in stacks}))
    (folder / "commands.sh").write_text(_script(system, cases, stacks, db))
    (folder / "README.md").write_text(_readme(system, cases, stacks, stack_diff))
    return cases


def _script(system: str, cases: Sequence[ReproCase], stacks: Mapping[str, Mapping[str, Any]], db: str) -> str:
    lines = ["#!/bin/sh", f"# regressions of {system} on stacks {', '.join(stacks)}", "set -e", ""]
    for sid, stack in stacks.items():
        lines += [f"# stack {sid}: run in an environment with", f"#   {install_line(stack)}"]
        lines += [case.commands[sid] for case in cases]
        lines.append("")
    lines.append(shlex.join(["benanza", "analyze", "regressions", "--system", f"{system}-repro", "--db", db]))
    return "\n".join(lines) + "\n"


def _readme(
    system: str, cases: Sequence[ReproCase], stacks: Mapping[str, Mapping[str, Any]], stack_diff: Sequence[str]
) -> str:
    lines = [
        f"# Reproducing the regressions of {system}",
        "",
        f"Stacks: {', '.join(f'`{s}`' for s in stacks)}. Each model below is one regressed unit alone;",
        "`commands.sh` measures them on each stack (install that stack's libraries first) into one",
        f"database, then compares the stacks of the system `{system}-repro`.",
        "",
        "| unit | change | interval | model |",
        "|---|---|---|---|",
    ]
    for case in cases:
        t = case.target
        lines.append(f"| {t.label} | {t.change:+.1%} | {t.low:+.1%} .. {t.high:+.1%} | {case.model_file.name} |")
    lines += ["", "Stack differences:", ""]
    lines += [f"- {d}" for d in stack_diff] or ["- none"]
    for sid, stack in stacks.items():
        lines += ["", f"On stack `{sid}` ({install_line(stack)}):", "", "```sh"]
        lines += [case.commands[sid] for case in cases] + ["```"]
    return "\n".join(lines) + "\n"
