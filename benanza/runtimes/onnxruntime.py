"""ONNX Runtime on the CPU execution provider.

How layers are benchmarked so that the composed estimate compares like with like:

- Every benchmark (a layer, an execution group, a sequence, a whole model) runs as its own
  ONNX model in a session with the *same* options: ``graph_optimization_level`` (default
  ``extended``), ``intra_op_num_threads`` and sequential execution. These options are the
  runtime's variant and are stored with every result.
- ORT rewrites graphs (folds BatchNormalization into Conv, fuses activations). Benanza asks
  ORT itself how it executes each model: ``execution_groups`` saves ORT's optimized graph
  for the model and maps each executed node back to the original layers it absorbed. A
  group of several layers (Conv+BN+Relu) is benchmarked as one network, so ORT fuses it
  exactly as in the whole model. Layer keys of the original model are unchanged.
- ``all`` (ORT's default) adds NCHWc layout transforms that change the data layout *between*
  layers; a layer run alone then pays layout conversions the whole model does not. That is
  why ``extended`` is the default here; ``all`` can be selected and is recorded.

Two figures per benchmark: the call latency from the harness (the session run on the
benchmark's inputs bound once as ONNX Runtime tensors, ``bound_call``: what a framework that
keeps its tensors in ONNX Runtime sees; a caller feeding numpy arrays pays their conversion on
top, which no layer inside a model pays), and the kernel time from ORT's own per-node profiler (microsecond
resolution; sum of the node durations of one run, each less the span the profiler gives a
node that does nothing, ``node_floor_s``).
"""

from __future__ import annotations

import atexit
import functools
import itertools
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from benanza.bench import host_cache, host_cpu
from benanza.bench.build import (
    DEFAULT_OPSET,
    IR_VERSION,
    build_held,
    build_onnx,
    data_length_feeds,
    disabled_optimizers,
    is_sink,
    sink_feeds,
)
from benanza.bench.memory import spec_memory
from benanza.bench.spec import EXPORTED, RUNTIME_DEFAULTS, BenchmarkSpec, SpecKind, model_binding
from benanza.errors import BenanzaError, PlanningError, UsageError, one_line
from benanza.model.dtypes import ort_value
from benanza.model.given_inputs import given_feeds, missing_input_file
from benanza.model.graph import InputKind, ModelGraph
from benanza.model.held_weights import HeldModel, hold_weights
from benanza.model.load import held_apart, with_synthetic_weights
from benanza.model.run_values import model_feeds
from benanza.model.synthetic import SYNTHETIC_WEIGHTS
from benanza.model.walks import node_reads, stable_topological_order
from benanza.runtimes.base import KernelProfiler, Prepared, Runtime, register_runtime

if TYPE_CHECKING:
    from benanza.model.process import ProcessedModel

OPT_LEVELS = ("disabled", "basic", "extended", "all")
EXECUTION_PROVIDERS = ("cpu", "cuda")
PROFILE_WARMUP = 2  # profiled runs left out of kernel times: first-run allocations


def _ort():
    import onnxruntime

    return onnxruntime


# ONNX Runtime's session configuration entries (onnxruntime_session_options_config_keys.h) that keep
# an idle intra-op thread pool from spinning. A pool's threads spin after each parallel section
# and after each run by default; the interleaved schedule keeps hundreds of sessions alive and
# runs them in turn, and their spinning threads took the cores from the one being timed (at 2
# threads on 2 cores the zoo's compositions came out 3-8x end to end). Without spinning, a
# thread waits on the OS for its next work: every session, parts and whole, pays that alike.
NO_SPINNING = {
    "session.intra_op.allow_spinning": "0",  # kOrtSessionOptionsConfigAllowIntraOpSpinning
    "session.force_spinning_stop": "1",  # kOrtSessionOptionsConfigForceSpinningStop: stop when Run() returns
}


# ORT's name for a cast it inserts to run a float16 op in float32 (``insert_cast_transformer.cc``)
_PRECISION_CAST_PREFIX = "InsertedPrecisionFreeCast_"
# The layout conversions ORT's level-3 transformers insert: ``ReorderInput`` and ``ReorderOutput``
# around NCHWc regions (ops of their own), and around NHWC int8 ones a ``Transpose`` named
# ``Transpose`` (``_token_<n>`` when the name is taken); a built network's own nodes are named
# ``n<k>`` (``bench/build.py``).
_REORDERS = frozenset({"ReorderInput", "ReorderOutput"})
_INSERTED_TRANSPOSE = re.compile(r"Transpose(?:_token_\d+)?")
_CASTS_LEFT_OUT = (
    "casts ONNX Runtime inserts to run float16 ops in float32 (InsertedPrecisionFreeCast_*) and the layout "
    "conversions it inserts at level all (ReorderInput, ReorderOutput, Transpose)"
)


def inserted_by_runtime(node: str, op_type: str) -> bool:
    """Whether ORT inserted the profiled node ``node`` (an ``op_type``) to run a unit in another precision
    or layout.

    A unit run alone pays one at each of its inputs and outputs, where the model keeps the
    precision or layout from one layer to the next (``profile_kernel_times``). By op and name, not
    by name alone: ORT names an NCHWc node after the tensor it writes, which in a float16 graph is
    an ``InsertedPrecisionFreeCast_`` one (a float16 ResNet-50's convolutions were all read as casts).
    """
    if op_type == "Cast":
        return node.startswith(_PRECISION_CAST_PREFIX)
    if op_type == "Transpose":
        return _INSERTED_TRANSPOSE.fullmatch(node) is not None
    return op_type in _REORDERS


def session_options(opt_level: str, threads: int, profile: bool = False, optimized_path: str | None = None):
    """The session options every benchmark of a runtime variant shares (``NO_SPINNING`` included)."""
    ort = _ort()
    levels = {
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    so = ort.SessionOptions()
    so.graph_optimization_level = levels[opt_level]
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # fatal only: a run that fails is an answer benanza reports per layer (its exception's message); ORT's own
    # error line for it (a red "[E:onnxruntime:...] Non-zero status code") repeated it on stderr
    so.log_severity_level = 4
    for key, value in NO_SPINNING.items():
        so.add_session_config_entry(key, value)
    if profile:
        so.enable_profiling = True
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    return so


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Synthetic inputs for every runtime input of ``model`` (shapes must be static), sinks' axes as built.

    Floats are random; an integer or boolean input is zeros where it reaches an index slot (ids), ones
    (True) elsewhere: a mask with every position valid (``run_values.input_fills``). An input with an
    initializer (a value the model computes, ``build_onnx``) is left to it.
    """
    feeds = sink_feeds(model)
    return {**feeds, **model_feeds(model, seed, skip=feeds)}


# ONNX Runtime raises its own exception classes, with no common base below ``Exception``.
_ORT_ERRORS = (
    "Fail",
    "InvalidArgument",
    "NoSuchFile",
    "NoModel",
    "EngineError",
    "RuntimeException",
    "InvalidProtobuf",
    "ModelLoaded",
    "NotImplemented",
    "InvalidGraph",
    "EPFail",
)


def ort_errors() -> tuple[type[Exception], ...]:
    """ONNX Runtime's exception classes (what building a session raises for a model it cannot run)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    return tuple(cls for name in _ORT_ERRORS if isinstance(cls := getattr(state, name, None), type))


def ort_message(exc: BaseException) -> str:
    """ONNX Runtime's message in one line, without its ``[ONNXRuntimeError] : 1 : FAIL :`` prefix."""
    return re.sub(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*", "", one_line(exc))


@dataclass(frozen=True)
class _CpuModel:
    """What a benchmark's CPU sessions are built from: its timed session and its profiling ones.

    ``weights``: the arrays of the model's held-apart initializers (``model.held_weights``), given
    to every session by name; they must outlive the sessions, which may read them in place.
    ``folder``: where the weights it left in their file are (``HeldModel.folder``).
    """

    model_bytes: bytes
    feeds: dict[str, np.ndarray]
    opt_level: str
    threads: int
    disabled: tuple[str, ...] = ()  # ONNX Runtime optimizers left out (``build.disabled_optimizers``)
    weights: Mapping[str, np.ndarray] = field(default_factory=dict)
    folder: str = ""

    def session(self, profile_prefix: str | None = None) -> Any:
        """A CPU session of the model (``profile_prefix``: with ORT's profiler on, writing there)."""
        so = session_options(self.opt_level, self.threads, profile=profile_prefix is not None)
        if profile_prefix is not None:
            so.profile_file_prefix = profile_prefix
        hold_weights(so, self.weights, self.folder)
        return _ort().InferenceSession(
            self.model_bytes, so, providers=["CPUExecutionProvider"], disabled_optimizers=list(self.disabled)
        )


def bound_call(session: Any, feeds: dict[str, np.ndarray]) -> Any:
    """``session``'s IO binding with ``feeds`` bound once as ONNX Runtime tensors, its outputs to the CPU.

    A timed call (``run_with_iobinding``) then runs the session on tensors ONNX Runtime already
    holds, as a layer inside a model reads the tensor the layer before it wrote. Fed numpy arrays
    (``session.run``), each call converts its inputs first: a cost that a layer inside the model
    never pays, that grows with the inputs, and that the composition's call-overhead network
    (one float) does not show. Side by side on a 2-core VM (``benchmarks/layer_in_chain.py``): a
    ``Relu`` of one float called in 17.6 us fed numpy, 7.9 us bound; a ``MatMul`` of a 393 KB
    input cost 86 us more alone than per copy in a chain of its copies, beyond that overhead, fed
    numpy at 2 threads, 3 us bound (206 and 109 us at 1 thread). The arrays in ``feeds`` must
    outlive the binding: the tensors share their memory.
    """
    binding = session.io_binding()
    for name in feeds:
        # bound as a view: held contiguous in ``feeds`` itself, which outlives the binding (not a copy that would not)
        array = feeds[name]
        if not array.flags.c_contiguous:  # (``np.ascontiguousarray`` of a scalar is 1-D: a scalar is contiguous)
            feeds[name] = array = np.ascontiguousarray(array)
        binding.bind_ortvalue_input(name, ort_value(array))  # a bfloat16 array too
    for output in session.get_outputs():
        binding.bind_output(output.name)
    return binding


def _runner(session: Any, feeds: dict[str, np.ndarray]) -> Callable[[], object]:
    """One run of ``session`` on ``feeds``, as the profiled runs have always been made (``session.run``),
    but where a feed or an output is of a type numpy has none of (bfloat16, float8: ``ml_dtypes``
    arrays): through an IO binding (``bound_call``), its outputs left as ONNX Runtime tensors. A bfloat16
    Transpose failed to be fed ("Creation of OrtValues is currently only supported from non-string numpy
    arrays"), a Cast to bfloat16 to be read back ("No corresponding Numpy type for Tensor Type")."""
    numpy_types = all(a.dtype.kind in "biufcOSU" for a in feeds.values()) and not any(
        o.type in _NO_NUMPY_TYPES for o in session.get_outputs()
    )
    if numpy_types:
        return functools.partial(session.run, None, feeds)
    binding = bound_call(session, feeds)
    return functools.partial(session.run_with_iobinding, binding)


# ONNX Runtime's names of the element types numpy has no type of (``NodeArg.type``)
_NO_NUMPY_TYPES = frozenset(
    f"tensor({t})"
    for t in (
        "bfloat16",
        "float8e4m3fn",
        "float8e4m3fnuz",
        "float8e5m2",
        "float8e5m2fnuz",
        "float4e2m1",
        "int4",
        "uint4",
    )
)


# what a record's ``outputs`` says where a call binds its outputs anew (``_BoundCall.call``)
OUTPUTS_REBOUND = "bound anew before each call: their lengths change from call to call"


def _output_shape_changed(exc: BaseException) -> bool:
    """ONNX Runtime refusing an output of another shape than the one it allocated on an earlier call (1.32's
    words, and earlier releases')."""
    text = str(exc)
    return "computed output shape" in text or "shape verification failed" in text


class _BoundCall:
    """A call of ``run_with_iobinding`` whose outputs ONNX Runtime allocates where ``_outputs_on`` says
    (``bind_output``'s device type and id), bound anew before each call once ONNX Runtime refuses an
    output of another length than the first call's (a text-to-speech model's random durations), which
    the record says (``provenance["outputs"]``). On the CPU (``_OrtPrepared``) and in the CUDA
    execution provider (``OrtCudaModel``) alike."""

    _session: Any
    _binding: Any
    _outputs_on: tuple[str, int] = ("cpu", 0)
    _rebinds = False  # outputs bound anew before each call (``call``)

    def call(self) -> object:
        if self._rebinds:  # (the harness holds this method: it cannot be swapped for another)
            return self._call_rebinding()
        try:
            self._session.run_with_iobinding(self._binding)
        except Exception as exc:  # ``run_with_iobinding`` raises a RuntimeError, not one of ``ort_errors``
            if not _output_shape_changed(exc):
                raise
            # the outputs' lengths change from call to call (a text-to-speech model's random durations): ONNX
            # Runtime allocated them on the first call and refuses another length into them; bound anew
            # before each call from now on, which the record says
            self._rebinds = True
            self.provenance = {**self.provenance, "outputs": OUTPUTS_REBOUND}
            self._call_rebinding()
        return None

    def _call_rebinding(self) -> object:
        self._binding.clear_binding_outputs()
        for output in self._session.get_outputs():
            self._binding.bind_output(output.name, *self._outputs_on)
        self._session.run_with_iobinding(self._binding)
        return None


class _OrtPrepared(_BoundCall, Prepared):
    left_out_what = _CASTS_LEFT_OUT
    evicts = True  # ``evict_weights``: other data through the host's caches, a session of one float, the inputs

    def __init__(
        self,
        model_bytes: bytes,
        feeds: dict[str, np.ndarray],
        opt_level: str,
        threads: int,
        disabled: Sequence[str] = (),
        weights: Mapping[str, np.ndarray] | None = None,
        provenance: Mapping[str, Any] | None = None,
        folder: str = "",
    ) -> None:
        """``disabled``: ONNX Runtime optimizers the sessions leave out (``build.disabled_optimizers``);
        ``weights``: the model's held-apart initializers (``model.held_weights``); ``provenance``: what
        the record says of the sessions beyond the variant; ``folder``: where the weights it left in
        their file are (``HeldModel.folder``)."""
        if provenance:
            self.provenance = dict(provenance)
        self._model = _CpuModel(model_bytes, feeds, opt_level, threads, tuple(disabled), dict(weights or {}), folder)
        # the binding's memory: C order, a 0-d array kept 0-d (``np.ascontiguousarray`` would make it 1-d)
        self._feeds = {name: np.require(array, requirements="C") for name, array in feeds.items()}
        self._session = self._model.session()
        self._binding = bound_call(self._session, self._feeds)
        self.profiled_run_times: list[float] = []  # of the latest ``kernel_times``
        self.profiled_left_out: list[float] = []
        self.profiled_node_floor_s = 0.0

    def evict_weights(self, nbytes: int) -> None:
        """``nbytes`` of other data read through the host's caches (``host_cache.evict``), the call path
        warm again (a session of one float), the inputs read back in: as a model leaves them for a layer
        that streams its weights. Evicted alone, the call path's own code and data are cold too: a
        ``Reshape`` timed after a flush took 26 us more than warm, 10 us with the session of one float
        run in between (2-core VM)."""
        evict_caches(self._model.opt_level, self._model.threads, self._feeds, nbytes)

    def outputs(self) -> list[np.ndarray]:
        """The outputs of the latest ``call`` (its sinks' one element each), copied out of the binding."""
        return [value.numpy() for value in self._binding.get_outputs()]

    def kernel_times(self, runs: int, evict_bytes: int = 0) -> list[float] | None:
        """Sum of ORT's per-node kernel durations for each of ``runs`` profiled runs (``evict_bytes``:
        each after ``evict_weights(evict_bytes)``)."""
        profiler = self.profiler(evict_bytes=evict_bytes)
        try:
            for _ in range(runs):
                profiler.run()
            kernel = profiler.finish()
            self.profiled_run_times = profiler.run_times
            self.profiled_left_out = profiler.left_out
            self.profiled_node_floor_s = profiler.node_floor_s
            return kernel
        finally:
            profiler.close()

    def profiler(self, precalls: int = 0, evict_bytes: int = 0) -> _OrtProfiler:
        """A second session of the same model with ORT's profiler on, for kernel times.

        Args:
            precalls: unkept profiled runs before each kept one. The profiling session holds
                its own copy of the weights: run right after another benchmark (the
                interleaved schedule), its first run finds them out of cache and is slower than
                the same kernels inside a model (shufflenet's units summed to 1.4x the whole
                model that way; with one precall, 0.97x).
            evict_bytes: the kept run after ``evict_weights(evict_bytes)`` (of the profiling session's
                inputs); 0: none.
        """
        return _OrtProfiler(self._model, precalls, evict_bytes)

    def close(self) -> None:
        self._session = None
        self._binding = None


# A chain of nodes that do nothing (each a ``Relu`` of one float), profiled to learn what ORT's
# profiler adds to every node's span (``node_floor_s``).
_FLOOR_NODES = 16
_FLOOR_RUNS = 40


@functools.cache
def node_floor_s(opt_level: str, threads: int) -> float:
    """The span ORT's profiler gives a node that does nothing, in seconds, at these session options.

    A profiled node's span holds the profiler's own work besides the kernel's: reading the
    clock, recording the event and, with more than one intra-op thread, collecting the pool's
    per-thread statistics. Here a ``Relu`` of one float spans 1.2 us at 1 thread and 2.4 us at
    2, where inside a network, unprofiled, it adds 0.18 us to a run
    (``benchmarks/profiler_floor.py``). Scaling a run's kernel time by its unprofiled share
    (``execute.without_profiler_overhead``) takes out only part of a cost that is fixed per
    node: the rest stayed in every node's kernel time, and a model of many small nodes (a
    recurrent ``torch.onnx`` export, 9 ``Gemm``s of 64x64, 11 us end to end) had a sequential
    bound of 17 us, 60% above its end to end (2.6 us with the floor out).
    Measured once per process and options: the median over runs of a chain's mean node span.
    """
    model = noop_chain(_FLOOR_NODES)
    session = _CpuModel(model.SerializeToString(), {}, opt_level, threads).session(
        profile_prefix=str(_profile_dir() / f"ort-{next(_PROFILES)}")
    )
    feeds = feeds_for(model)
    for _ in range(PROFILE_WARMUP + _FLOOR_RUNS):
        session.run(None, feeds)
    profile = Path(session.end_profiling())
    try:
        runs = profile_kernel_times(json.loads(profile.read_text()))
    finally:
        profile.unlink(missing_ok=True)
    kept = slice(PROFILE_WARMUP, None)
    spans = [k / n for k, n in zip(runs.kernel[kept], runs.nodes[kept], strict=True) if n]
    if not spans:
        raise BenanzaError(
            f"ONNX Runtime {_ort().__version__}'s profiler recorded no node of a chain of {_FLOOR_NODES}"
        )
    return float(np.median(spans))


@functools.cache
def _call_path(opt_level: str, threads: int) -> tuple[Any, Any, dict[str, np.ndarray]]:
    """A session of one float (``noop_chain(1)``), its binding and its input, kept for ``evict_caches``."""
    model = noop_chain(1)
    feeds = {name: np.require(a, requirements="C") for name, a in feeds_for(model).items()}
    session = _CpuModel(model.SerializeToString(), feeds, opt_level, threads).session()
    return session, bound_call(session, feeds), feeds


def evict_caches(opt_level: str, threads: int, feeds: Mapping[str, np.ndarray], nbytes: int) -> None:
    """Read ``nbytes`` of other data through the host's caches, run a session of one float at these
    options, read ``feeds`` back in."""
    host_cache.evict(nbytes)
    session, binding, _ = _call_path(opt_level, threads)
    session.run_with_iobinding(binding)
    for array in feeds.values():
        host_cache.touch(array)


def noop_chain(nodes: int) -> onnx.ModelProto:
    """A chain of ``nodes`` nodes that do nothing (each a ``Relu`` of one float), at the builder's IR version."""
    from onnx import TensorProto, helper

    names = ["x", *(f"h{i}" for i in range(1, nodes)), "y"]
    graph = helper.make_graph(
        [helper.make_node("Relu", [a], [b]) for a, b in itertools.pairwise(names)],
        "noop_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", DEFAULT_OPSET)], ir_version=IR_VERSION)


class _OrtProfiler(KernelProfiler):
    """A profiling session: ``run`` once per wanted run, then ``finish`` for per-run kernel times.

    Kept apart from the timed session because profiling slows every call down. Its first
    ``PROFILE_WARMUP`` runs happen here and are left out of ``finish``, and so are the
    ``precalls`` runs that ``run`` makes before each kept one.
    """

    left_out_what = _CASTS_LEFT_OUT

    def __init__(self, model: _CpuModel, precalls: int = 0, evict_bytes: int = 0) -> None:
        self._model = model  # its held weights outlive the session
        self._feeds = model.feeds
        self._every = precalls + 1
        self._evict_bytes = evict_bytes
        self._file: Path | None = None
        self.run_times: list[float] = []
        self.left_out: list[float] = []
        self.node_floor_s = node_floor_s(model.opt_level, model.threads)
        self._session = model.session(profile_prefix=str(_profile_dir() / f"ort-{next(_PROFILES)}"))
        self._run = _runner(self._session, self._feeds)
        try:
            for _ in range(PROFILE_WARMUP):
                self._run()
        except BaseException:
            self.close()
            raise

    def run(self) -> None:
        for _ in range(self._every - 1):
            self._run()
        if self._evict_bytes:
            evict_caches(self._model.opt_level, self._model.threads, self._feeds, self._evict_bytes)
        self._run()

    def finish(self) -> list[float]:
        """Kernel time (seconds) of every kept run, in order; ends profiling.

        ``run_times`` then holds the same runs' whole durations in the profiled session, and
        ``left_out`` their inserted precision casts (``profile_kernel_times``); every node's
        span, in all three, less ``node_floor_s``.
        """
        self._file = Path(self._session.end_profiling())
        events = json.loads(self._file.read_text())
        kept = slice(PROFILE_WARMUP + self._every - 1, None, self._every)
        runs = profile_kernel_times(events, self.node_floor_s)
        self.run_times = runs.run_times[kept]
        self.left_out = runs.casts[kept]
        return runs.kernel[kept]

    def close(self) -> None:
        """Ends profiling if ``finish`` did not, and removes the profile's file."""
        if self._session is not None and self._file is None:
            self._file = Path(self._session.end_profiling())
        self._session = None
        if self._file is not None:
            self._file.unlink(missing_ok=True)


# One folder per process for every profiling session's file (each removed once read): a
# folder per benchmark cost ~10 ms of directory creation and removal on a busy VM's disk,
# a fifth of a small layer's fixed cost (benchmarks/fixed_cost.py).
_PROFILES = itertools.count()


_PROFILE_PREFIX = "benanza-prof-"


@functools.cache
def _profile_dir() -> Path:
    """This process's profile folder, removed at exit; folders of processes gone are removed first.

    A process killed before its exit handlers ran (a fleet worker stopped with its Ray
    cluster, an isolated benchmark's child ended on its timeout) leaves its folder behind:
    on a machine that benchmarks every day they piled up in the temporary folder (126 in
    half a day here). Each folder is named after its process id, so the next process removes
    those whose process no longer exists and that nothing wrote to for an hour (a process of
    another PID namespace sharing the folder, another container's, still writes to its own).
    """
    parent = Path(tempfile.gettempdir())
    remove_stale_profile_folders(parent)
    folder = tempfile.TemporaryDirectory(prefix=f"{_PROFILE_PREFIX}{os.getpid()}-", dir=parent)
    atexit.register(folder.cleanup)
    return Path(folder.name)


_STALE_AFTER_S = 3600.0


def remove_stale_profile_folders(parent: Path) -> list[Path]:
    """Remove this user's profile folders in ``parent`` left by processes gone (``_profile_dir``); those removed."""
    removed = []
    for stale in parent.glob(f"{_PROFILE_PREFIX}*-*"):
        pid = stale.name[len(_PROFILE_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _process_exists(int(pid)) and _own_stale_folder(stale):
            shutil.rmtree(stale, ignore_errors=True)  # another process may be removing it too
            if not stale.exists():
                removed.append(stale)
    return removed


def _own_stale_folder(path: Path) -> bool:
    """A folder (not a link to one) of this user's that nothing wrote to for ``_STALE_AFTER_S``."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and time.time() - st.st_mtime > _STALE_AFTER_S


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


CUDA_PROVIDER = "CUDAExecutionProvider"

# How a unit's outputs are built (``bench/build.py``): read by a sink since units stopped
# running unfused where the model fuses them, a dequantized output by a GatherElements sink
# since a Slice one made ORT add a Q/DQ pair (or, at opset 21 with int8, refuse the unit), and
# with ORT's QDQ propagation left out where a dequantized output is reached through a Reshape or
# the like (``bench/build.py``).
# Part of the stack, so a database's earlier records (outputs as graph outputs, or every sink
# a Slice, with their failures) are a different stack, never mixed with these.
UNIT_OUTPUTS = "sink, dequantized outputs by GatherElements, no QDQ propagation to them"

# How a timed call runs its session (``bound_call``); part of the stack, so that call latencies of
# sessions fed numpy arrays each call (``session.run``: each call's own input conversion) are never
# mixed with these.
CALL = "run_with_iobinding, inputs bound once as OrtValues, outputs to the CPU"

# How a kernel time is taken from ORT's profiler; part of the stack, so that records whose node
# spans kept the profiler's own cost of each node (``node_floor_s``) are never mixed with these.
KERNEL_TIME = "node spans less a no-op node's span, scaled by the unprofiled call over the profiled run"


def cuda_provider_missing() -> str | None:
    """None when ONNX Runtime's CUDA execution provider is installed, else why not (one line)."""
    try:
        providers = _ort().get_available_providers()
    except ImportError:
        return "onnxruntime is not installed"
    if CUDA_PROVIDER not in providers:
        return (
            f"ONNX Runtime's CUDA execution provider is not available (providers: {', '.join(providers)}); "
            "install onnxruntime-gpu for the framework's end-to-end latency on the GPU"
        )
    return None


class OrtCudaModel(_BoundCall, Prepared):
    """A model in ONNX Runtime's CUDA execution provider, inputs and outputs bound on the device.

    The call is ``run_with_iobinding``: ONNX Runtime launches every kernel and synchronises its
    stream before returning, so the call latency is what a framework user waits for, with no
    host-device copies. The session uses ORT's defaults for the GPU (optimisation level
    ``all``, exhaustive cuDNN convolution search), as a user of the framework gets them.
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        device: int = 0,
        precision: str = "float32",
        disabled: Sequence[str] = (),
        feeds: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """``disabled``: ONNX Runtime optimizers the session leaves out (``build.disabled_optimizers``);
        ``feeds``: its inputs (default: ``feeds_for(model)``)."""
        from benanza.errors import GpuError

        ort = _ort()
        missing = cuda_provider_missing()
        if missing:
            raise GpuError(missing)
        if precision != "float32":
            raise GpuError(f"the end-to-end model runs in its own float32, not {precision}")
        so = session_options("all", 1)
        options = {"device_id": device, "cudnn_conv_algo_search": "EXHAUSTIVE"}
        self._session = ort.InferenceSession(
            model.SerializeToString(), so, providers=[(CUDA_PROVIDER, options)], disabled_optimizers=list(disabled)
        )
        if CUDA_PROVIDER not in self._session.get_providers():
            raise GpuError("ONNX Runtime did not start its CUDA execution provider for this model")
        self.provenance = {"framework": "onnxruntime-cuda", "onnxruntime": ort.__version__, "opt": "all"}
        self._binding = self._session.io_binding()
        self._inputs = []  # the device copies of the inputs live as long as the binding
        for name, array in (feeds_for(model) if feeds is None else feeds).items():
            value = ort_value(array, device=("cuda", device))  # a bfloat16 array too
            self._inputs.append(value)
            self._binding.bind_ortvalue_input(name, value)
        self._outputs_on = ("cuda", device)
        for out in self._session.get_outputs():
            self._binding.bind_output(out.name, *self._outputs_on)

    def kernel_times(self, runs: int, evict_bytes: int = 0) -> list[float] | None:
        return None  # ORT's profiler times CUDA kernels on the host side: not a kernel time

    def close(self) -> None:
        self._binding = None
        self._inputs = []
        self._session = None


def kernel_times_from_profile(events: Sequence[dict[str, Any]]) -> list[float]:
    """Per-run kernel time (seconds) from ORT profiler events, inserted precision casts left out."""
    return profile_kernel_times(events).kernel


@dataclass(frozen=True)
class ProfiledRuns:
    """Per profiled run (in time order): its kernel time, the casts left out of it, its nodes, its duration."""

    kernel: list[float]  # seconds
    casts: list[float]  # seconds of inserted precision casts, apart from ``kernel``
    nodes: list[int]  # node events it holds, sinks, casts and a subgraph's nodes included (not their control flow)
    run_times: list[float]  # seconds of the whole ``model_run``


def profile_kernel_times(events: Sequence[dict[str, Any]], node_floor_s: float = 0.0) -> ProfiledRuns:
    """Per-run kernel time (seconds) from ORT profiler events, and per run the casts left out of it.

    Node events (``cat == "Node"``, names ending ``_kernel_time``) are assigned to the
    ``model_run`` session event whose interval holds them; durations are microseconds. A
    node inside another node's interval is a node of its subgraph (an ``If`` branch's or a
    ``Loop`` body's nodes are profiled within the ``If``'s or the ``Loop``'s own event): the
    subgraph's nodes are counted, the control-flow node that holds them is not. Its span beyond
    them is the runtime's, not a kernel's (an Optimum T5 merged decoder's ``If``: 1.37x the sum of
    its nodes under the profiler, 1.01x of the branch alone unprofiled: ``benchmarks/branch_cost.py``):
    a model whose ``If`` is measured as the branch it takes (``benanza.model.steering``) is
    compared with that branch's layers, and the ``If`` shows in its end to end only.

    The casts ORT inserts to run a float16 op in float32 (``InsertedPrecisionFreeCast_*``:
    its CPU provider lacks most float16 kernels) are left out of the kernel time and summed
    apart. A layer measured alone pays one at every float16 input and output; inside the
    model ORT removes each pair between two such ops, so counting them made a float16
    Whisper encoder's layers sum to 1.6x the whole model (106 ms of casts in the layers,
    9 ms in the model). Left out, the sum stays a lower bound: the casts the model keeps are
    in its end-to-end latency. The layout conversions ORT inserts at level ``all`` are left out
    alike (``inserted_by_runtime``): a convolution alone runs in NCHWc blocks between a
    ``ReorderInput`` and a ``ReorderOutput``, an int8 one in NHWC between two ``Transpose``s, where
    the model converts once per region; counted, an int8 ResNet-50's units summed to 1.07x its
    end to end at level ``all``. A built network's sinks (``bench/build.py``) are not counted.

    ``node_floor_s``: the span the profiler gives a node that does nothing (the function
    ``node_floor_s``), taken out of each counted node's span and, once per node it holds, of
    each run's duration (never below zero).
    """
    runs = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"
    )
    totals = [0.0] * len(runs)
    casts = [0.0] * len(runs)
    counted = {"kernel": [0] * len(runs), "casts": [0] * len(runs), "all": [0] * len(runs)}
    nodes = sorted(
        (e["ts"], -e["dur"], str(e["name"]), str((e.get("args") or {}).get("op_name", "")))
        for e in events
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")
    )
    for index, (ts, neg_dur, name, op_type) in enumerate(nodes):
        if index + 1 < len(nodes) and _holds((ts, ts - neg_dur), nodes[index + 1]):
            continue  # a control-flow node: its subgraph's nodes, which follow it, are counted
        run = next((i for i, (start, end) in enumerate(runs) if start <= ts <= end), None)
        if run is None:
            continue
        counted["all"][run] += 1
        if is_sink(name):
            continue  # what a built network's output costs to read, not the network (bench/build.py)
        cast = inserted_by_runtime(name.removesuffix("_kernel_time"), op_type)
        (casts if cast else totals)[run] += -neg_dur * 1e-6
        counted["casts" if cast else "kernel"][run] += 1
    return ProfiledRuns(
        kernel=[max(0.0, t - n * node_floor_s) for t, n in zip(totals, counted["kernel"], strict=True)],
        casts=[max(0.0, c - n * node_floor_s) for c, n in zip(casts, counted["casts"], strict=True)],
        nodes=counted["all"],
        run_times=[
            max(0.0, (end - start) * 1e-6 - n * node_floor_s)
            for (start, end), n in zip(runs, counted["all"], strict=True)
        ],
    )


def _holds(span: tuple[float, float], node: tuple[float, float, str, str]) -> bool:
    """Whether the node event ``node`` (``(ts, -dur, ...)``) lies within ``span``: a node of its subgraph
    (events sorted by start, the longest first, so a control-flow node comes just before its first node)."""
    start, end = span
    return start <= node[0] and node[0] - node[1] <= end


@register_runtime("onnxruntime")
class OnnxRuntimeCPU(Runtime):
    """ONNX Runtime, CPU execution provider."""

    name = "onnxruntime"

    def __init__(self, threads: int | str | None = None, opt_level: str = "extended", ep: str = "cpu") -> None:
        """
        Args:
            threads: intra-op threads: a positive number; ``"auto"``, the cores the other processes
                leave free when this process first asks (``host_cpu.free_cores_once``: the main job's
                default, so that a busy neighbour does not compete with the session's threads); None,
                every core.
        """
        if opt_level not in OPT_LEVELS:
            raise UsageError(f"unknown ONNX Runtime optimisation level {opt_level!r}; known: {', '.join(OPT_LEVELS)}")
        if ep not in EXECUTION_PROVIDERS:
            raise UsageError(f"unknown ONNX Runtime execution provider {ep!r}; known: {', '.join(EXECUTION_PROVIDERS)}")
        if threads is not None and not host_cpu.is_threads_setting(threads):
            raise UsageError(f"ONNX Runtime threads must be a positive integer or 'auto', got {threads!r}")
        self._notes: tuple[str, ...] = ()
        if threads == host_cpu.AUTO and ep == "cpu":  # with CUDA the host's threads only feed the device
            chosen = host_cpu.free_cores_once()
            self.threads, self._notes = chosen.threads, (chosen.note(),)
        else:
            self.threads = threads if isinstance(threads, int) else host_cpu.host_cores()
        self.opt_level = opt_level
        self.ep = ep

    @property
    def interleaves(self) -> bool:
        """The CPU provider is measured interleaved at any thread count.

        Each session with more than one intra-op thread owns a thread pool; the interleaved
        schedule keeps a model's sessions alive and runs them in turn. Spinning pools made
        that useless (the spinning threads of the sessions just run competed with the one
        being timed: the zoo's compositions came out 3 to 8 times end to end at 2 threads on
        2 cores); every session is built with ``NO_SPINNING``, so an idle pool sleeps.
        """
        return self.ep == "cpu"

    def variant(self) -> dict[str, Any]:
        """Its settings; at level ``all`` on the CPU also how layouts are measured (``layouts=per-layer``: groups
        without ORT's layout transformers, their conversions left out of kernel time), so that results of
        ``all`` stored before, whose groups took a model's body as one unit and whose kernel times counted
        the conversions, are another variant and never reused."""
        found: dict[str, Any] = {"ep": self.ep, "opt": self.opt_level, "threads": self.threads}
        if self.opt_level == "all" and self.ep == "cpu":
            found["layouts"] = "per-layer"
        return found

    def runtime_defaults(self) -> str | None:
        """ORT's default level, ``all``, where this variant's is another (the CPU provider's).

        Its layouts span layers, so the layers are measured at the variant's level (``extended`` by
        default): the model end to end at ``all`` says what that leaves out. At ``--opt-level all``
        the model end to end is already measured at ``all``.
        """
        if self.ep != "cpu" or self.opt_level == "all":
            return None
        return (
            "ONNX Runtime's default optimisation level, all: float32 convolutions in NCHWc blocks and int8 "
            "ones in NHWC across layers, float16 weights converted to float32 once at load"
        )

    def notes(self) -> tuple[str, ...]:
        return self._notes

    def cpu_threads(self) -> int | None:
        """Its intra-op threads with the CPU provider (the calling thread is one of them); None with CUDA."""
        return self.threads if self.ep == "cpu" else None

    def stack(self) -> dict[str, Any]:
        """ONNX Runtime's version and providers, how units are built, weighted and called, how kernel time is taken."""
        ort = _ort()
        return {
            "onnxruntime": ort.__version__,
            "providers": ",".join(ort.get_available_providers()),
            "unit_outputs": UNIT_OUTPUTS,
            "call": CALL,
            "synthetic_weights": SYNTHETIC_WEIGHTS,
            "kernel_time": KERNEL_TIME,
        }

    def host_memory_bytes(self, spec: BenchmarkSpec) -> int | None:
        """The memory guard's estimate of one prepared benchmark (``benanza.bench.memory``).

        None with the CUDA execution provider: its tensors live on the device.
        """
        return spec_memory(spec).total if self.ep == "cpu" else None

    def supports(self, spec: BenchmarkSpec) -> str | None:
        if spec.kind is SpecKind.MODEL:
            path = (spec.model or {}).get("path")
            if not path or not Path(path).exists():
                return f"model file not available on this system: {path}"
            missing = missing_input_file(spec.model or {})
            if missing:
                return missing
        elif spec.network is None:
            return "spec carries no network to build"
        if self.ep == "cuda":
            return cuda_provider_missing()
        return None

    def prepare(self, spec: BenchmarkSpec) -> _OrtPrepared | OrtCudaModel:
        """The benchmark's sessions; on the CPU its large weights held apart (``model.held_weights``)."""
        apart = self.ep == "cpu"  # the CUDA provider's sessions are given whole models
        if spec.kind is SpecKind.MODEL:
            from benanza.model.load import load_model
            from benanza.model.process import process_model

            info = dict(spec.model or {})
            exported = spec.as_exported and apart
            shipped = load_model(info["path"]) if exported else None  # read once: processed, then run as it is
            processed = process_model(info["path"], *model_binding(info), shipped, keep_branches=True)  # as shipped
            if shipped is not None:
                return self._exported(shipped, processed)
            proto = processed.proto
            held = held_apart(proto) if apart else HeldModel(with_synthetic_weights(proto), {})
            disabled = []  # the model as its users run it
            feeds = given_feeds(feeds_for(held.proto), processed.binding.given)
            if spec.at_runtime_defaults and apart:
                at_defaults = {"session": RUNTIME_DEFAULTS, "opt": "all", "defaults": self.runtime_defaults() or ""}
                model_bytes = held.proto.SerializeToString()
                return _OrtPrepared(model_bytes, feeds, "all", self.threads, (), held.weights, at_defaults, held.folder)
        elif spec.network is None:
            raise UsageError(f"spec {spec.key} carries no network to build")
        else:
            net = spec.network
            held = build_held(net, sink=True) if apart else HeldModel(build_onnx(net, sink=True), {})
            disabled = disabled_optimizers(held.proto)
            feeds = data_length_feeds(net, feeds_for(held.proto))
        model = held.proto
        if not apart:
            return OrtCudaModel(model, disabled=disabled, feeds=feeds)
        return _OrtPrepared(
            model.SerializeToString(),
            feeds,
            self.opt_level,
            self.threads,
            disabled,
            held.weights,
            folder=held.folder,
        )

    def runs_exported(self) -> bool:
        """On the CPU provider (its sessions take a model with free dimensions as it is)."""
        return self.ep == "cpu"

    def _exported(self, model: onnx.ModelProto, processed: ProcessedModel) -> _OrtPrepared:
        """The model as its file is (``BenchmarkSpec.as_exported``; ``model``, as loaded, is changed): the
        dimensions it leaves free left free and fed the bound shapes, an input that chooses a branch defaulted
        to its bound value (as the model bound is), at the variant's settings."""
        from benanza.model.steering import default_inputs

        default_inputs(model, processed.binding.shapes, processed.binding.values)
        held = held_apart(model)
        bound = given_feeds(feeds_for(processed.proto), processed.binding.given)  # the names: the file's inputs
        inits = {t.name for t in model.graph.initializer}
        feeds = {vi.name: bound[vi.name] for vi in model.graph.input if vi.name not in inits}
        model_bytes = held.proto.SerializeToString()
        exported = {"session": EXPORTED}
        return _OrtPrepared(model_bytes, feeds, self.opt_level, self.threads, (), held.weights, exported, held.folder)

    def execution_groups(self, graph: ModelGraph, proto: onnx.ModelProto) -> list[list[int]]:
        """The model's layers grouped as ORT executes them at this optimisation level.

        Raises:
            PlanningError: ORT cannot build the model's optimized graph (an op of a domain it
                does not know, an op it does not implement); the plan then measures each layer
                alone.
        """
        providers = [CUDA_PROVIDER] if self.ep == "cuda" else ["CPUExecutionProvider"]
        try:
            optimized = optimized_model(held_apart(proto), self.opt_level, providers, disabled=LAYOUT_TRANSFORMERS)
        except ort_errors() as exc:
            reason = f"ONNX Runtime cannot build its optimized graph: {ort_message(exc)}"
            raise PlanningError(graph.path, reason) from None
        return groups_from_optimized(graph, optimized)


def optimized_model(
    model: onnx.ModelProto | HeldModel,
    opt_level: str,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    disabled: Sequence[str] = (),
) -> onnx.ModelProto:
    """The graph ONNX Runtime runs for ``model`` at ``opt_level`` (its optimized model file, read back).

    ``model``: any model (held apart here, ``load.held_apart``), or one held apart already. The
    optimized file holds every initializer, unless the held weights (those left in their file too) come
    to ``WEIGHTS_FILE_BYTES``: then they go to a file of their own beside it (never read back: the graph
    is what is wanted), as a file of more than protobuf's 2 GB cannot be written. Not always, because ONNX Runtime
    1.32 then writes the nodes in another order, which could change how ``groups_from_optimized``
    assigns a layer that two fused nodes read (a fused GELU's nodes came out reordered).

    Raises:
        ONNX Runtime's own errors (``ort_errors``): it cannot build a session of the model.
    """
    held = model if isinstance(model, HeldModel) else held_apart(model)  # a processed model's marks too
    with tempfile.TemporaryDirectory(prefix="benanza-opt-") as tmp:
        path = str(Path(tmp) / "optimized.onnx")
        so = session_options(opt_level, 1, optimized_path=path)
        if held.external_bytes() >= WEIGHTS_FILE_BYTES:
            so.add_session_config_entry(_OPTIMIZED_WEIGHTS_FILE, "optimized.weights")
        hold_weights(so, held.weights, held.folder)
        _ort().InferenceSession(
            held.proto.SerializeToString(), so, providers=list(providers), disabled_optimizers=list(disabled)
        )
        return onnx.load(path, load_external_data=False)


# ORT's level-3 layout transformers (``graph_transformer_utils.cc``): they rename every tensor they
# re-lay out (NCHWc blocks, NHWC for int8 convolutions), so the optimized graph no longer says which
# original layers a node covers
LAYOUT_TRANSFORMERS = ("NchwcTransformer", "NhwcTransformer")

# held weights from which ``optimized_model`` writes the optimized model's initializers to a file of their own
WEIGHTS_FILE_BYTES = 1 << 30
# kOrtSessionOptionsOptimizedModelExternalInitializersFileName (onnxruntime_session_options_config_keys.h)
_OPTIMIZED_WEIGHTS_FILE = "session.optimized_model_external_initializers_file_name"


def groups_from_optimized(graph: ModelGraph, optimized: onnx.ModelProto) -> list[list[int]]:
    """Map each node of a runtime-optimized graph back to the original layers it covers.

    An optimized node covers the original layers between the tensors it reads and the
    tensors it writes (walking back from its outputs, stopping at its inputs and at layers
    already covered). Layers no node covers stay alone. Groups come back ordered by their
    last layer.

    Where ORT runs a float16 graph in float32 (its CPU provider lacks most float16 kernels),
    it renames every tensor it now computes in float32 to ``InsertedPrecisionFreeCast_<name>``
    (``insert_cast_transformer.cc``); those names are read as the tensors they stand for, or a
    single node's walk back would swallow the whole model.
    """
    producer: dict[str, int] = {}
    for layer in graph.layers:
        for t in layer.outputs:
            producer[t.name] = layer.index

    def original(name: str) -> str:
        if name not in producer and name.startswith(_PRECISION_CAST_PREFIX):
            return name[len(_PRECISION_CAST_PREFIX) :]
        return name

    assigned: dict[int, int] = {}
    groups: list[list[int]] = []
    for node in optimized.graph.node:
        outs = [original(o) for o in node.output if original(o) in producer]
        if not outs:
            continue
        stop = {original(x) for x in node_reads(node)}  # a control-flow node's captured outer tensors too
        members: set[int] = set()
        stack = [producer[o] for o in outs]
        while stack:
            idx = stack.pop()
            if idx in members or idx in assigned:
                continue
            members.add(idx)
            for inp in graph.layers[idx].inputs:
                name = inp.tensor.name
                if inp.kind is InputKind.ACTIVATION and name not in stop and name in producer:
                    stack.append(producer[name])
        if members:
            gid = len(groups)
            groups.append(sorted(members))
            for m in members:
                assigned[m] = gid
    groups.extend([i] for i in range(len(graph.layers)) if i not in assigned)
    return _in_dependency_order(graph, sorted(groups, key=lambda g: g[-1]))


def _in_dependency_order(graph: ModelGraph, groups: list[list[int]]) -> list[list[int]]:
    """Groups ordered so that each comes after every group it reads from, else by last layer.

    Ordering by last layer alone misplaces a group that took a layer several groups read: a
    QDQ model's ``DequantizeLinear`` feeding the query, key and value ``MatMul`` goes with the
    first fused node that claims it, which may come after another reader. Groups that depend
    on each other both ways stay ordered by last layer (the plan then says so).
    """
    owner = {i: g for g, members in enumerate(groups) for i in members}
    edges = ((owner[a], owner[b]) for a, b in graph.edges if owner[a] != owner[b])
    order = stable_topological_order(len(groups), edges)
    if len(order) != len(groups):  # a cycle between groups
        return groups
    return [groups[g] for g in order]
