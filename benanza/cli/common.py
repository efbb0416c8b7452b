"""What every command shares: its options, each declared once with one spelling, and their parsing.

A command's signature lists the options it takes from here; no command declares its own
variant of one (the database options are in ``store_options``). Errors are handled once, by
``BenanzaGroup``, the class of every command group.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup

from benanza.bench.host_cpu import AUTO
from benanza.config import MAIN_JOB_GRANULARITIES
from benanza.errors import BenanzaError, UsageError
from benanza.model.load import expand_model_paths
from benanza.model.names import NamedModel, model_name, same_file
from benanza.model.zoo import zoo_paths
from benanza.report.output import OutputFormat
from benanza.settings import Settings, load_settings


class BenanzaGroup(TyperGroup):
    """The one place where a ``BenanzaError`` becomes one line on stderr and exit status 2.

    Every command group (the root and each noun's) is one; a command runs inside its group's
    ``invoke``, so no command handles errors itself. Anything else (a bug) keeps its traceback.
    """

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BenanzaError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(2) from None


def cli_settings() -> Settings:
    """The ``BENANZA_*`` settings of this command: read from the environment on first use, then kept
    on the root context, so that every part of one command sees the same values (and ``--help``
    works whatever they are)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return load_settings()
    root = ctx.find_root()
    if not isinstance(root.obj, Settings):
        root.obj = load_settings()
    return root.obj


MAIN_JOB_GRANULARITY = ",".join(map(str, MAIN_JOB_GRANULARITIES))  # --granularity of the main job's commands

FormatOpt = Annotated[
    OutputFormat, typer.Option("--format", "-f", help="table for people; json or csv (the JSON's columns) for programs")
]
# Numeric flags are taken as text and parsed by ``parse_count``/``parse_int_list``: a bad value is
# then a one-line ``UsageError`` like every other error, not click's usage box.
_BATCH_HELP = "batch sizes, comma-separated: bind the leading dimension of every input"
_OWN_BATCH = "the model's own, 1 where its file leaves it free"


def _batch_option(help: str, metavar: str = "N[,N...]") -> Any:
    """A ``--batch`` flag taken as text (None when not given), its default said in its help."""
    return Annotated[str | None, typer.Option("--batch", "-b", metavar=metavar, help=help, show_default=False)]


BatchesOpt = _batch_option(f"{_BATCH_HELP} (default: {_OWN_BATCH})")
# the commands that read stored plans: a filter, every stored batch size unless given
StoredBatchesOpt = _batch_option(
    "only the plans of these batch sizes, comma-separated (default: every stored batch size)"
)
# analyze systems' corpus, whose coverage is counted at one batch size
CorpusBatchOpt = _batch_option("the corpus's batch size (default: each model's smallest stored batch size)", "N")
FleetBatchesOpt = _batch_option(f"{_BATCH_HELP} (default: the config's batch_sizes, else {_OWN_BATCH})")
GranOpt = Annotated[str, typer.Option("--granularity", "-g", help="DLBricks sequence sizes G, comma-separated")]
ShapeOpt = Annotated[
    list[str] | None,
    typer.Option("--shape", "-s", help="bind an input's shape, NAME=1x3x640x640 (repeatable)"),
]
DimOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--dim",
        help="bind a symbolic dimension by name in every input that has it, NAME=N (repeatable): "
        "--dim past_sequence_length=128 binds a decoder's whole KV cache",
    ),
]
ValueOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--value",
        help="bind an input that chooses an If's branch to a value, NAME=V (repeatable): "
        "--value use_cache_branch=0 measures a merged decoder's first step (default: the value it is fed)",
    ),
]
InputOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--input",
        help="feed an input its values from a file, NAME=FILE.npy, FILE.npz (by name) or an ONNX .pb or folder of "
        "them (repeatable): its model's lengths and end to end are run on them (default: synthetic values)",
    ),
]
ModelsArg = Annotated[
    list[Path] | None,
    typer.Argument(help="ONNX files or folders of them (default: the zoo in the onnx wheel)", show_default=False),
]
StoredModelsArg = Annotated[
    list[Path] | None,
    typer.Argument(
        help="models to show: ONNX files, folders of them, or model names (default: every stored model)",
        show_default=False,
    ),
]
StoredModelsOpt = Annotated[
    list[Path] | None,
    typer.Option("--models", "-m", help="models to show: ONNX file, folder or name (repeatable); default: all stored"),
]
ModelsOpt = Annotated[
    list[Path] | None,
    typer.Option("--models", "-m", help="ONNX file or folder (repeatable); default: the zoo in the onnx wheel"),
]
_THREADS_HELP = "intra-op threads; auto: the cores other processes leave free when it starts"
ThreadsOpt = Annotated[
    str | None, typer.Option("--threads", metavar="N|auto", help=f"{_THREADS_HELP} (default: every core)")
]
MainThreadsOpt = Annotated[str, typer.Option("--threads", metavar="N|auto", help=_THREADS_HELP)]  # the main job's
ThreadsFilterOpt = Annotated[
    str | None, typer.Option("--threads", metavar="N", help="only the stored variants run at N intra-op threads")
]
OptLevelOpt = Annotated[str, typer.Option("--opt-level", help="ONNX Runtime graph optimisation level")]
SystemOpt = Annotated[str | None, typer.Option("--system", help="system name (default: $BENANZA_SYSTEM or hostname)")]
SystemsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--system",
        help="stored systems to analyze: names (repeatable or comma-separated) or 'all' (default: this machine)",
    ),
]
StackOpt = Annotated[str, typer.Option("--stack", help="with --system: 'latest' stack of each system, 'all', or an id")]
MinTimeOpt = Annotated[float | None, typer.Option("--min-time", help="minimum seconds of samples per benchmark")]
MaxTimeOpt = Annotated[float | None, typer.Option("--max-time", help="time cap in seconds per benchmark")]
RuntimeOpt = Annotated[
    str, typer.Option("--runtime", help="onnxruntime (CPU, or --ep cuda) or cudnn (the GPU runtime)")
]
EpOpt = Annotated[str | None, typer.Option("--ep", help="onnxruntime: execution provider, cpu or cuda")]
PrecisionOpt = Annotated[
    str | None, typer.Option("--precision", help="cudnn: float32, float16 or bfloat16 (default float32)")
]
TensorCoresOpt = Annotated[
    bool | None,
    typer.Option("--tensor-cores/--no-tensor-cores", help="cudnn: allow tensor cores (float32: TF32); default on"),
]
ScheduleOpt = Annotated[
    str | None,
    typer.Option(
        "--schedule",
        help="interleaved (the default: each model's benchmarks sampled together in rounds, so host drift hits "
        "the parts and the whole alike; holds a model's benchmarks in memory at once) or sequential (one "
        "benchmark after another)",
    ),
]

RetryFailedOpt = Annotated[
    bool, typer.Option("--retry-failed", help="measure stored failures again (after an upgrade that fixed their cause)")
]

# -- regressions (``analyze regressions``, ``fleet status``) ----------------------------------
RepeatOpt = Annotated[
    bool,
    typer.Option(
        "--repeat",
        help="measure again what is stored for this stack; the replaced results are kept as repeats "
        "($BENANZA_KEEP_REPEATS, default 10), from which analyze regressions learns the noise",
    ),
]
ThresholdOpt = Annotated[
    str, typer.Option("--threshold", metavar="FRACTION", help="smallest change flagged: 0.05 or 5% (5% slower/faster)")
]
ConfidenceOpt = Annotated[str, typer.Option("--confidence", metavar="LEVEL", help="confidence of the intervals")]
BaseStackOpt = Annotated[
    str | None, typer.Option("--base", metavar="STACK", help="stack id to compare against (default: the one before)")
]
HeadStackOpt = Annotated[
    str | None, typer.Option("--head", metavar="STACK", help="stack id to compare (default: the latest)")
]
HistoryOpt = Annotated[
    bool, typer.Option("--history", help="compare a stack's own repeated runs over time instead of two stacks")
]


class FailOn(StrEnum):
    none = "none"
    regression = "regression"
    change = "change"  # a regression or an improvement


FailOnOpt = Annotated[
    FailOn, typer.Option("--fail-on", help="exit status 1 when a regression (or any change) is flagged: a CI gate")
]
ReproOpt = Annotated[
    Path | None,
    typer.Option("--repro", metavar="DIR", help="write each regressed unit as an ONNX model and its bench commands"),
]


def parse_fraction(text: str, flag: str, *, low: float = 0.0, high: float = 1.0) -> float:
    """``0.05`` or ``5%`` as 0.05, strictly between ``low`` and ``high``; else a one-line ``UsageError``."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"{flag} expects a fraction such as 0.05 or 5%, got {text!r}") from None
    if not low < value < high:
        raise UsageError(f"{flag} expects a value between {low:g} and {high:g} (exclusive), got {text!r}")
    return value


def model_paths(models: list[Path] | None) -> list[Path]:
    return expand_model_paths(list(models)) if models else zoo_paths()


def parse_batches(text: str | None) -> list[int | None]:
    """``--batch``: its batch sizes, or ``[None]`` (the model's own batch, 1 where its file leaves it free:
    ``shapes.bind_shapes``) when not given."""
    return parse_int_list(text, "--batch") if text else [None]


def model_names(models: list[Path] | None, known: Iterable[NamedModel] = ()) -> list[str] | None:
    """The model names that MODELS select among the ``known`` (stored) ones: a name as given; a file's
    (or a folder's files') stored names, found by the file (``same_file``), else its stem."""
    if not models:
        return None
    known = list(known)
    folders = [m for m in models if m.is_dir()]
    files = [*(expand_model_paths(folders) if folders else []), *(m for m in models if m.suffix == ".onnx")]
    names = [str(m) for m in models if not m.is_dir() and m.suffix != ".onnx"]
    for f in files:
        stored = [k.name for k in known if same_file(k.path, str(f))]
        names += list(dict.fromkeys(stored)) or [model_name(f)]
    return names


def one_batch(text: str | None, command: str) -> int | None:
    """``--batch`` of a command that looks at one binding of a model: at most one size."""
    batches = parse_batches(text)
    if len(batches) > 1:
        raise UsageError(f"{command} takes one batch size, got --batch {text}")
    return batches[0]


def parse_int_list(text: str, flag: str) -> list[int]:
    """``"1,8"`` -> ``[1, 8]``; anything but positive integers is a one-line ``UsageError``."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag} expects comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{flag} expects positive integers, got {text!r}")
    return values


def parse_threads(text: str | None, flag: str) -> int | str | None:
    """A thread flag: ``auto`` (``host_cpu.free_cores``) or a positive integer; else a one-line ``UsageError``."""
    return AUTO if text is not None and text.strip() == AUTO else parse_count(text, flag)


def parse_count(text: str | None, flag: str, minimum: int = 1) -> int | None:
    """One integer flag of at least ``minimum`` (None when not given); else a one-line ``UsageError``."""
    if text is None:
        return None
    kind = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
    try:
        value = int(text.strip())
    except ValueError:
        raise UsageError(f"{flag} expects {kind}, got {text!r}") from None
    if value < minimum:
        raise UsageError(f"{flag} expects {kind}, got {text!r}")
    return value
