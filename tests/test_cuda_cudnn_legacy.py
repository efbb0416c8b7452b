"""The cuDNN legacy runtime: descriptor arithmetic and tables on any machine, real candidates on a GPU."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from benanza.errors import GpuError, LibraryCallError, UnsupportedLayer
from benanza.runtimes.cuda import cudnn_legacy as cl
from benanza.runtimes.cuda.params import (
    ActivationParams,
    BatchNormParams,
    ConvParams,
    LrnParams,
    PoolParams,
    SoftmaxParams,
)


def conv(**changes: Any) -> ConvParams:
    """1x3x8x8 by 4 filters of 3x3, pad 1: the small convolution the GPU tests run too."""
    base: dict[str, Any] = {
        "x": (1, 3, 8, 8),
        "w": (4, 3, 3, 3),
        "y": (1, 4, 8, 8),
        "pads_begin": (1, 1),
        "pads_end": (1, 1),
        "strides": (1, 1),
        "dilations": (1, 1),
        "groups": 1,
        "dtype": "float32",
    }
    return ConvParams(**(base | changes))


# ------------------------------------------------------------------ tables (cuDNN 9 headers)


def test_enum_names_by_value_follow_the_headers() -> None:
    assert cl.FWD_ALGO_NAMES[0] == "IMPLICIT_GEMM"
    assert cl.FWD_ALGO_NAMES[1] == "IMPLICIT_PRECOMP_GEMM"
    assert cl.FWD_ALGO_NAMES[7] == "WINOGRAD_NONFUSED"
    assert len(cl.FWD_ALGO_NAMES) == cl.FWD_ALGO_COUNT == 8
    assert cl.BWD_DATA_ALGO_NAMES[1] == "ALGO_1" and cl.BWD_DATA_ALGO_NAMES[3] == "FFT_TILING"
    assert len(cl.BWD_DATA_ALGO_NAMES) == cl.BWD_DATA_ALGO_COUNT == 6
    assert cl.MATH_TYPE_NAMES == {
        0: "DEFAULT_MATH",
        1: "TENSOR_OP_MATH",
        2: "TENSOR_OP_MATH_ALLOW_CONVERSION",
        3: "FMA_MATH",
    }
    assert (cl.DATA_TYPE["FLOAT"], cl.DATA_TYPE["DOUBLE"], cl.DATA_TYPE["HALF"], cl.DATA_TYPE["BFLOAT16"]) == (
        0,
        1,
        2,
        9,
    )
    assert cl.ACTIVATION_MODE_NAMES[1] == "RELU" and cl.ACTIVATION_MODE["IDENTITY"] == 5
    assert cl.POOLING_MODE["AVERAGE_COUNT_EXCLUDE_PADDING"] == 2
    assert cl.SOFTMAX_ALGORITHM == {"FAST": 0, "ACCURATE": 1, "LOG": 2}
    assert cl.SOFTMAX_MODE["CHANNEL"] == 1 and cl.BATCHNORM_MODE["SPATIAL"] == 1
    assert cl.CONVOLUTION_MODE["CROSS_CORRELATION"] == 1 and cl.TENSOR_FORMAT["NCHW"] == 0


def test_status_names_and_their_categories() -> None:
    assert cl.status_name(0) == "CUDNN_STATUS_SUCCESS"
    assert cl.status_name(3000) == "CUDNN_STATUS_NOT_SUPPORTED"
    assert cl.status_name(2002) == "CUDNN_STATUS_BAD_PARAM_NULL_POINTER"
    assert cl.status_name(3099) == "CUDNN_STATUS_NOT_SUPPORTED(3099)"  # unknown code: named by its category
    assert cl.status_name(77) == "CUDNN_STATUS_77"
    assert cl.unsupported_status("CUDNN_STATUS_NOT_SUPPORTED_SHAPE")
    assert cl.unsupported_status("CUDNN_STATUS_BAD_PARAM")
    assert not cl.unsupported_status("CUDNN_STATUS_EXECUTION_FAILED")
    assert not cl.unsupported_status("CUDNN_STATUS_INTERNAL_ERROR")


@pytest.mark.parametrize(
    ("encoded", "text"), [(90100, "9.1.0"), (91002, "9.10.2"), (91300, "9.13.0"), (8907, "8.9.7"), (7605, "7.6.5")]
)
def test_version_decode(encoded: int, text: str) -> None:
    assert cl.decode_version(encoded) == text


def test_compute_capability_parse() -> None:
    assert cl.parse_compute_capability("90") == (9, 0)
    assert cl.parse_compute_capability("86") == (8, 6)
    assert cl.parse_compute_capability("120") == (12, 0)


# ------------------------------------------------------------------ shapes and descriptor arguments


def test_packed_strides() -> None:
    assert cl.packed_strides((2, 3, 4, 5)) == (60, 20, 5, 1)
    assert cl.packed_strides((1, 4, 8, 8, 2)) == (512, 128, 16, 2, 1)
    assert cl.packed_strides((7,)) == (1,)


def test_shapes_are_promoted_to_four_dimensions_with_trailing_ones() -> None:
    assert cl.cudnn_shape((2, 3, 4)) == (2, 3, 4, 1)
    assert cl.cudnn_shape((5,)) == (5, 1, 1, 1)
    assert cl.cudnn_shape((1, 2, 3, 4, 5)) == (1, 2, 3, 4, 5)
    assert cl.four_d((2, 3, 4, 5, 6, 7)) == (24, 5, 6, 7)
    assert cl.four_d((10, 20)) == (10, 20, 1, 1)
    assert cl.batchnorm_shape((8, 16)) == (8, 16, 1, 1)
    assert cl.batchnorm_shape((8, 16, 30)) == (8, 16, 30, 1)
    assert cl.batchnorm_shape((8, 16, 2, 3, 4, 5)) == (8, 16, 120, 1)
    assert cl.batchnorm_shape((8, 16, 2, 3, 4)) == (8, 16, 2, 3, 4)


def test_conv_descriptor_args_2d() -> None:
    args = cl.conv_descriptor_args(conv(strides=(2, 1), dilations=(1, 2), pads_begin=(1, 2), pads_end=(1, 2)))
    assert (args.x, args.w, args.y) == ((1, 3, 8, 8), (4, 3, 3, 3), (1, 4, 8, 8))
    assert (args.pads, args.strides, args.dilations, args.groups) == ((1, 2), (2, 1), (1, 2), 1)
    assert args.bias == (1, 4, 1, 1)


def test_one_d_convolution_is_promoted_to_2d() -> None:
    p = conv(
        x=(2, 3, 10), w=(6, 1, 3), y=(2, 6, 4), pads_begin=(0,), pads_end=(0,), strides=(2,), dilations=(1,), groups=3
    )
    args = cl.conv_descriptor_args(p)
    assert (args.x, args.w, args.y) == ((2, 3, 10, 1), (6, 1, 3, 1), (2, 6, 4, 1))
    assert (args.pads, args.strides, args.dilations, args.groups) == ((0, 0), (2, 1), (1, 1), 3)
    assert args.bias == (1, 6, 1, 1)
    assert cl.params_check(p) is None


def test_three_d_convolution_keeps_five_dimensions() -> None:
    p = conv(
        x=(1, 2, 4, 6, 6),
        w=(3, 2, 3, 3, 3),
        y=(1, 3, 2, 4, 4),
        pads_begin=(0, 0, 0),
        pads_end=(0, 0, 0),
        strides=(1, 1, 1),
        dilations=(1, 1, 1),
    )
    args = cl.conv_descriptor_args(p)
    assert args.x == (1, 2, 4, 6, 6) and args.bias == (1, 3, 1, 1, 1) and args.pads == (0, 0, 0)
    assert cl.params_check(p) is None


def test_conv_output_spatial() -> None:
    assert cl.conv_output_spatial((8, 8), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)) == (8, 8)
    assert cl.conv_output_spatial((224, 224), (7, 7), (3, 3), (3, 3), (2, 2), (1, 1)) == (112, 112)
    assert cl.conv_output_spatial((10,), (3,), (0,), (0,), (1,), (2,)) == (6,)


def test_pooling_arguments_promote_1d() -> None:
    p = PoolParams("max", (1, 4, 9), (1, 4, 4), (3,), (0,), (2,), "float32")
    args = cl.pooling_descriptor_args(p)
    assert (args.x, args.y, args.window, args.pads, args.strides) == (
        (1, 4, 9, 1),
        (1, 4, 4, 1),
        (3, 1),
        (0, 0),
        (2, 1),
    )
    assert cl.pooling_check(p) is None
    assert "mode" in (cl.pooling_check(PoolParams("lp", (1, 4, 9), (1, 4, 4), (3,), (0,), (2,), "float32")) or "")


def test_softmax_view_is_outer_dim_inner_1() -> None:
    p = SoftmaxParams(outer=6, dim=1000, inner=1, log=False, dtype="float16")
    assert p.x == (6, 1000, 1, 1) and cl.softmax_check(p) is None
    assert cl.softmax_check(SoftmaxParams(2, 3, 4, False, "int8")) is not None


# ------------------------------------------------------------------ compute, math and tensor-core rules


def test_compute_type_is_float_for_reduced_precision() -> None:
    assert cl.compute_type("float32") == cl.DATA_TYPE["FLOAT"]
    assert cl.compute_type("float16") == cl.DATA_TYPE["FLOAT"]
    assert cl.compute_type("bfloat16") == cl.DATA_TYPE["FLOAT"]
    assert cl.compute_type("float64") == cl.DATA_TYPE["DOUBLE"]
    assert cl.data_type("float16") == cl.DATA_TYPE["HALF"] and cl.data_type("bfloat16") == 9
    with pytest.raises(UnsupportedLayer, match="int8"):
        cl.data_type("int8")


@pytest.mark.parametrize(
    ("dtype", "tensor_cores", "expected"),
    [
        ("float32", True, "DEFAULT_MATH"),
        ("float32", False, "FMA_MATH"),
        ("float16", True, "TENSOR_OP_MATH"),
        ("float16", False, "FMA_MATH"),
        ("bfloat16", True, "TENSOR_OP_MATH"),
        ("bfloat16", False, "FMA_MATH"),
        ("float64", False, "FMA_MATH"),
    ],
)
def test_math_type_table(dtype: str, tensor_cores: bool, expected: str) -> None:
    assert cl.MATH_TYPE_NAMES[cl.math_type(dtype, tensor_cores)] == expected


def test_tensor_core_use_is_none_where_cudnn_does_not_say() -> None:
    m = cl.MATH_TYPE
    assert cl.tensor_core_use(m["TENSOR_OP_MATH"], "float16", (9, 0)) is True
    assert cl.tensor_core_use(m["TENSOR_OP_MATH"], "float16", (6, 1)) is False  # Pascal has none
    assert cl.tensor_core_use(m["FMA_MATH"], "float32", (9, 0)) is False
    assert cl.tensor_core_use(m["DEFAULT_MATH"], "float32", (9, 0)) is None  # TF32 allowed, use unreported
    assert cl.tensor_core_use(m["DEFAULT_MATH"], "float32", (9, 0), tf32_override="0") is False
    assert cl.tensor_core_use(m["DEFAULT_MATH"], "float32", (7, 5)) is False  # no TF32 before Ampere
    assert cl.tensor_core_use(m["DEFAULT_MATH"], "float32", None) is None


def test_scaling_factors_are_double_only_for_double_data() -> None:
    assert [cl.scaling_type(d) for d in ("float32", "float16", "bfloat16", "float64")] == [
        "float",
        "float",
        "float",
        "double",
    ]


def test_activation_coefficient() -> None:
    assert cl.activation_coef("clipped_relu", 6.0) == 6.0
    assert cl.activation_coef("elu", 0.5) == 0.5
    assert cl.activation_coef("relu", 0.0) == sys.float_info.max  # no ceiling on a plain ReLU


# ------------------------------------------------------------------ what the legacy API cannot run


def test_params_check_accepts_a_plain_convolution() -> None:
    assert cl.params_check(conv()) is None
    assert cl.params_check(conv(bias=True, activation="relu")) is None


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"pads_begin": (0, 0), "pads_end": (1, 1), "y": (1, 4, 7, 7)}, "asymmetric pads"),
        (
            {
                "x": (1, 3, 4, 4, 4, 4),
                "w": (4, 3, 1, 1, 1, 1),
                "y": (1, 4, 4, 4, 4, 4),
                "pads_begin": (0,) * 4,
                "pads_end": (0,) * 4,
                "strides": (1,) * 4,
                "dilations": (1,) * 4,
            },
            "4 spatial dimensions",
        ),
        ({"groups": 2}, "group"),
        ({"y": (1, 4, 6, 6)}, "output spatial shape is [8, 8]"),
        ({"dtype": "int8"}, "int8 data"),
        ({"activation": "gelu"}, "fused activation gelu"),
        ({"x": (1, 3, 50000, 50000), "y": (1, 4, 50000, 50000)}, "2^31-1"),
    ],
)
def test_params_check_reasons(changes: dict[str, Any], words: str) -> None:
    reason = cl.params_check(conv(**changes))
    assert reason is not None and words in reason and "\n" not in reason


def test_params_check_of_a_conv_transpose() -> None:
    # ConvTranspose 1x4x5x5 -> 1x3x7x7 with W (C_in=4, C_out=3, 3, 3): the forward conv of y has x's shape.
    p = conv(x=(1, 4, 5, 5), w=(4, 3, 3, 3), y=(1, 3, 7, 7), pads_begin=(0, 0), pads_end=(0, 0), transpose=True)
    assert cl.params_check(p) is None
    args = cl.conv_descriptor_args(p)
    assert args.bias == (1, 3, 1, 1)
    assert "no fused backward-data" in (cl.params_check(conv(**{**_fields(p), "activation": "relu"})) or "")
    assert "input spatial shape" in (cl.params_check(conv(**{**_fields(p), "y": (1, 3, 9, 9)})) or "")


def _fields(p: ConvParams) -> dict[str, Any]:
    return {f: getattr(p, f) for f in p.__dataclass_fields__}


def test_lrn_bounds() -> None:
    ok = LrnParams((1, 64, 27, 27), size=5, alpha=1e-4, beta=0.75, k=1.0, dtype="float32")
    assert cl.lrn_check(ok) is None
    assert "1 to 16" in (cl.lrn_check(LrnParams((1, 64, 27, 27), 17, 1e-4, 0.75, 1.0, "float32")) or "")
    assert "lrnK" in (cl.lrn_check(LrnParams((1, 64, 27, 27), 5, 1e-4, 0.75, 0.0, "float32")) or "")
    assert "lrnBeta" in (cl.lrn_check(LrnParams((1, 64, 27, 27), 5, 1e-4, 0.001, 1.0, "float32")) or "")


def test_batchnorm_epsilon_bound() -> None:
    assert cl.BN_MIN_EPSILON == 0.0  # cudnn_ops.h of cuDNN 9
    assert cl.batchnorm_check(BatchNormParams((2, 8, 4, 4), 1e-5, "float16")) is None
    assert cl.batchnorm_check(BatchNormParams((2, 8, 4, 4), 0.0, "float32")) is None
    assert "CUDNN_BN_MIN_EPSILON" in (cl.batchnorm_check(BatchNormParams((2, 8, 4, 4), -1e-3, "float32")) or "")


def test_activation_check() -> None:
    assert cl.activation_check(ActivationParams("relu", (2, 3, 4, 5, 6), "float32")) is None
    assert "IDENTITY" in (cl.activation_check(ActivationParams("identity", (4,), "float32")) or "")
    assert "gelu" in (cl.activation_check(ActivationParams("gelu", (4,), "float32")) or "")


# ------------------------------------------------------------------ algorithm order and names


def test_algorithm_order_puts_the_heuristic_first_and_tries_every_algorithm() -> None:
    tensor_op, fma = cl.MATH_TYPE["TENSOR_OP_MATH"], cl.MATH_TYPE["FMA_MATH"]
    heuristic = [(1, tensor_op), (6, tensor_op), (1, tensor_op), (1, fma)]
    order = cl.algorithm_order(heuristic, cl.FWD_ALGO_COUNT, requested_math=tensor_op)
    assert order[:3] == [(1, tensor_op, 0), (6, tensor_op, 1), (1, fma, 3)]  # a repeated pair keeps its first rank
    assert [algo for algo, _, _ in order[3:]] == [0, 2, 3, 4, 5, 7]
    assert all(rank is None and m == tensor_op for _, m, rank in order[3:])


def test_candidate_names() -> None:
    m = cl.MATH_TYPE
    assert cl.candidate_name("IMPLICIT_PRECOMP_GEMM", m["FMA_MATH"]) == "IMPLICIT_PRECOMP_GEMM"
    assert cl.candidate_name("IMPLICIT_PRECOMP_GEMM", m["TENSOR_OP_MATH"]) == "IMPLICIT_PRECOMP_GEMM/tensor_op"
    assert cl.candidate_name("ALGO_1", m["DEFAULT_MATH"], "bwd_data:") == "bwd_data:ALGO_1"


def test_find_ranks_match_candidates_by_algorithm_and_math() -> None:
    m = cl.MATH_TYPE
    candidates = [("IMPLICIT_GEMM", 0), ("WINOGRAD/tensor_op", 6), ("FFT", 4)]
    found = [(6, m["TENSOR_OP_MATH"]), (4, m["TENSOR_OP_MATH"]), (2, m["DEFAULT_MATH"]), (0, m["FMA_MATH"])]
    ranks = cl.find_ranks(found, candidates, cl.FWD_ALGO_NAMES)
    # FFT came back with another math type than its candidate's: matched by algorithm; GEMM has no candidate.
    assert ranks == {"WINOGRAD/tensor_op": 0, "FFT": 1, "IMPLICIT_GEMM": 3}


# ------------------------------------------------------------------ finding the library


def test_wheel_library_paths(tmp_path: Path) -> None:
    for sub in ("a/nvidia/cudnn/lib", "b/nvidia/cu13/lib"):
        (tmp_path / sub).mkdir(parents=True)
        (tmp_path / sub / "libcudnn.so.9").write_bytes(b"")
    (tmp_path / "c/nvidia/cudnn/lib").mkdir(parents=True)  # a folder without the library
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c", tmp_path / "a"]
    assert cl.wheel_library_paths(dirs) == [
        tmp_path / "a/nvidia/cudnn/lib/libcudnn.so.9",
        tmp_path / "b/nvidia/cu13/lib/libcudnn.so.9",
    ]


def test_loaded_library_path_from_proc_maps() -> None:
    maps = "\n".join(
        [
            "7f00-7f01 r-xp 00000000 08:01 123 /usr/lib/libc.so.6",
            "7f02-7f03 rw-p 00000000 00:00 0 ",
            "7f04-7f05 r-xp 00000000 08:01 456 /sp/nvidia/cudnn/lib/libcudnn_ops.so.9",
            "7f06-7f07 r-xp 00000000 08:01 789 /sp/nvidia/cudnn/lib/libcudnn.so.9",
        ]
    )
    assert cl.loaded_library_path(maps) == "/sp/nvidia/cudnn/lib/libcudnn.so.9"
    assert cl.loaded_library_path("7f00-7f01 r-xp 00000000 08:01 1 /opt/my libs/libcudnn.so.9.1.0") == (
        "/opt/my libs/libcudnn.so.9.1.0"
    )
    assert cl.loaded_library_path(maps.splitlines()[0]) is None


def test_a_missing_library_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cl, "_LOADED", {})
    monkeypatch.setattr(cl, "_FUNCTIONS", {})
    monkeypatch.setattr(cl, "_preload_cublaslt", lambda: None)
    monkeypatch.setattr(cl, "_library_candidates", lambda: ["/nonexistent/libcudnn.so.9"])
    with pytest.raises(GpuError) as caught:
        cl.cudnn_version()
    message = str(caught.value)
    assert "pip install 'benanza[gpu]'" in message and "nvidia-cudnn-cu13" in message
    assert "\n" not in message and not isinstance(caught.value, UnsupportedLayer)


def test_import_loads_no_gpu_library() -> None:
    code = (
        "import sys; import benanza.runtimes.cuda.cudnn_legacy as m; "
        "assert 'cupy' not in sys.modules, 'cupy imported'; "
        "assert not m._LOADED, 'cuDNN loaded'; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


# ------------------------------------------------------------------ the GPU path against a fake cuDNN


class FakeCudnn:
    """A cuDNN stand-in behind real ctypes function pointers of the bindings' own signatures.

    Every call goes through ctypes as on a GPU (argument conversion, out-parameters, status
    checks); the fake keeps descriptor state, computes output shapes as cuDNN does and
    answers heuristic, workspace and run calls from its settings.
    """

    def __init__(self) -> None:
        import ctypes

        self.ctypes = ctypes
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.tensors: dict[int, list[int]] = {}
        self.filters: dict[int, list[int]] = {}
        self.convs: dict[int, dict[str, Any]] = {}
        self.pools: dict[int, dict[str, Any]] = {}
        self.heuristic: list[tuple[int, int, int]] = []  # (algo, status, math type)
        self.found: list[tuple[int, int, int]] = []
        self.workspace: dict[int, int] = {}  # algo -> bytes
        self.no_workspace: set[int] = set()  # algos whose workspace query fails
        self.refuse: set[int] = set()  # algos a run refuses
        self.next_id = 0x1000
        self.errors: list[Exception] = []
        self.find_workspace: tuple[int, int] | None = None
        self.error_text = ctypes.create_string_buffer(b"CUDNN_STATUS_NOT_SUPPORTED")
        self.lib = SimpleNamespace()
        self._keep: list[Any] = []
        for name, (restype, argtypes) in cl._signatures().items():
            proto = ctypes.CFUNCTYPE(ctypes.c_void_p if restype is ctypes.c_char_p else restype, *argtypes)
            pointer = proto(self._callback(name))
            self._keep.append(pointer)
            setattr(self.lib, name, pointer)

    def _callback(self, name: str) -> Any:
        handler = getattr(self, name, None) or (self._create if name.startswith("cudnnCreate") else None)

        def call(*args: Any) -> Any:
            self.calls.append((name, args))
            try:
                return handler(*args) if handler else 0
            except Exception as exc:  # an exception cannot cross C: kept for the test to see
                self.errors.append(exc)
                return 4000

        return call

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def _create(self, out: Any) -> int:
        self.next_id += 16
        out[0] = self.next_id
        return 0

    def cudnnGetVersion(self) -> int:
        return 91002

    def cudnnGetErrorString(self, status: int) -> int:
        return self.ctypes.addressof(self.error_text)

    def cudnnGetLastErrorString(self, buffer: Any, size: int) -> None:
        text = b"fake: this geometry\n is not supported"
        self.ctypes.memmove(buffer, text, len(text) + 1)

    def cudnnSetTensorNdDescriptor(self, desc: int, dtype: int, n: int, dims: Any, strides: Any) -> int:
        self.tensors[desc] = list(dims[:n])
        assert tuple(strides[:n]) == cl.packed_strides(dims[:n])
        return 0

    def cudnnSetFilterNdDescriptor(self, desc: int, dtype: int, layout: int, n: int, dims: Any) -> int:
        self.filters[desc] = list(dims[:n])
        return 0

    def cudnnSetConvolutionNdDescriptor(self, desc: int, n: int, pads: Any, strides: Any, dils: Any, *rest: int) -> int:
        self.convs[desc] = {"pads": pads[:n], "strides": strides[:n], "dilations": dils[:n], "mode": rest[0]}
        return 0

    def cudnnSetConvolutionMathType(self, desc: int, math: int) -> int:
        self.convs[desc]["math"] = math
        return 0

    def cudnnGetConvolutionNdForwardOutputDim(self, conv: int, x: int, w: int, n: int, out: Any) -> int:
        c, xs, ws = self.convs[conv], self.tensors[x], self.filters[w]
        spatial = cl.conv_output_spatial(xs[2:], ws[2:], c["pads"], c["pads"], c["strides"], c["dilations"])
        for i, d in enumerate((xs[0], ws[0], *spatial)):
            out[i] = d
        return 0

    def cudnnGetConvolutionForwardAlgorithmMaxCount(self, handle: int, count: Any) -> int:
        count[0] = cl.FWD_ALGO_COUNT
        return 0

    def _answer(self, entries: list[tuple[int, int, int]], requested: int, returned: Any, perf: Any) -> int:
        for i, (algo, status, math) in enumerate(entries[:requested]):
            perf[i].algo, perf[i].status, perf[i].mathType = algo, status, math
        returned[0] = min(len(entries), requested)
        return 0

    def cudnnGetConvolutionForwardAlgorithm_v7(self, h: int, x: int, w: int, c: int, y: int, n: int, r: Any, p: Any):
        return self._answer(self.heuristic, n, r, p)

    def cudnnFindConvolutionForwardAlgorithmEx(self, h: int, *args: Any) -> int:
        requested, returned, perf, workspace, size = args[7:]
        self.find_workspace = (workspace, size)
        return self._answer(self.found, requested, returned, perf)

    def cudnnGetConvolutionForwardWorkspaceSize(self, h: int, x: int, w: int, c: int, y: int, algo: int, out: Any):
        if algo in self.no_workspace:
            return 3000
        out[0] = self.workspace.get(algo, 0)
        return 0

    def _run(self, algo: int, alpha: int, beta: int) -> int:
        assert self.ctypes.c_float.from_address(alpha).value == 1.0
        assert self.ctypes.c_float.from_address(beta).value == 0.0
        return 3000 if algo in self.refuse else 0

    def cudnnConvolutionForward(self, h: int, alpha: int, *args: Any) -> int:
        return self._run(args[5], alpha, args[8])

    def cudnnConvolutionBiasActivationForward(self, h: int, alpha: int, *args: Any) -> int:
        return self._run(args[5], alpha, args[8])

    def cudnnSetPoolingNdDescriptor(self, desc: int, mode: int, nan: int, n: int, window: Any, pads: Any, strides: Any):
        self.pools[desc] = {"window": window[:n], "pads": pads[:n], "strides": strides[:n]}
        return 0

    def cudnnGetPoolingNdForwardOutputDim(self, desc: int, x: int, n: int, out: Any) -> int:
        pool, xs = self.pools[desc], self.tensors[x]
        spatial = [
            (i + 2 * p - k) // s + 1
            for i, k, p, s in zip(xs[2:], pool["window"], pool["pads"], pool["strides"], strict=True)
        ]
        for i, d in enumerate((xs[0], xs[1], *spatial)):
            out[i] = d
        return 0


class FakeArray:
    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.host = np.zeros(shape, dtype=np.uint16 if dtype == "bfloat16" else np.dtype(dtype))
        self.data = SimpleNamespace(ptr=self.host.ctypes.data)


class FakeContext:
    ordinal, stream_ptr = 0, 0x5000

    def __init__(self) -> None:
        self.arrays: list[tuple[tuple[int, ...], str, str]] = []
        self.workspaces: list[int] = []
        self.synchronized = 0

    def array(self, shape: tuple[int, ...], dtype: str, fill: str = "random") -> FakeArray:
        self.arrays.append((tuple(shape), dtype, fill))
        return FakeArray(shape, dtype)

    def workspace(self, nbytes: int) -> int:
        self.workspaces.append(nbytes)
        return 0x7000_0000

    def synchronize(self) -> None:
        self.synchronized += 1


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeCudnn, FakeContext, cl.CudnnHandle]]:
    import ctypes
    import gc

    lib = FakeCudnn()
    monkeypatch.setattr(cl, "_LOADED", {"lib": lib.lib, "path": "/fake/libcudnn.so.9"})
    # a real libcudnn another test loaded is in this process's maps; the fake is the library here
    monkeypatch.setattr(cl, "loaded_library_path", lambda maps: None)
    monkeypatch.setattr(cl, "_FUNCTIONS", {})
    monkeypatch.setattr(cl, "_free_device_bytes", lambda: 10**9)
    handle = object.__new__(cl.CudnnHandle)  # CudnnHandle() asks CuPy for the device
    handle.ptr, handle.compute_capability = ctypes.c_void_p(0x77), (9, 0)
    yield lib, FakeContext(), handle
    handle.close()
    gc.collect()  # descriptors free themselves through the fake while it is installed
    assert not lib.errors


def test_conv_candidates_through_the_bindings(fake: tuple[FakeCudnn, FakeContext, cl.CudnnHandle]) -> None:
    lib, ctx, handle = fake
    fma = cl.MATH_TYPE["FMA_MATH"]
    lib.heuristic = [(1, 0, fma), (6, 0, fma), (0, 3000, fma), (2, 0, fma)]  # IMPLICIT_GEMM answered not supported
    lib.found = [(6, 0, fma), (1, 0, fma), (0, 0, fma)]
    lib.workspace = {1: 512, 6: 4096, 7: 2 * 10**9}  # WINOGRAD_NONFUSED wants more than memory holds
    lib.no_workspace = {4, 5}  # the FFTs do not support this geometry
    lib.refuse = {3}  # DIRECT is refused when run
    candidates = cl.conv_candidates(ctx, handle, conv(), tensor_cores=False)
    by_name = {c.name: c for c in candidates}
    assert list(by_name) == ["IMPLICIT_PRECOMP_GEMM", "WINOGRAD", "GEMM", "IMPLICIT_GEMM"]
    assert [c.heuristic_rank for c in candidates] == [0, 1, 2, None]  # ranks count SUCCESS entries only
    assert [c.name for c in candidates if c.default] == ["IMPLICIT_PRECOMP_GEMM"]
    assert by_name["WINOGRAD"].notes == ("math=FMA_MATH", "find_ex_pick", "find_ex_rank=0")
    assert by_name["IMPLICIT_GEMM"].notes == ("math=FMA_MATH", "find_ex_rank=2")
    assert (by_name["WINOGRAD"].workspace_bytes, by_name["GEMM"].workspace_bytes) == (4096, 0)
    assert all(c.tensor_cores is False and c.source == "cudnn-legacy" for c in candidates)
    assert ctx.workspaces == [4096] and ctx.synchronized == 1
    assert ctx.arrays == [
        ((1, 3, 8, 8), "float32", "random"),
        ((4, 3, 3, 3), "float32", "random"),
        ((1, 4, 8, 8), "float32", "zeros"),
    ]
    assert lib.find_workspace == (0x7000_0000, 4096)  # Find*Ex gets the candidates' largest workspace
    conv_desc = next(args[0] for name, args in lib.calls if name == "cudnnSetConvolutionMathType")
    assert lib.convs[conv_desc] == {
        "pads": [1, 1],
        "strides": [1, 1],
        "dilations": [1, 1],
        "mode": cl.CONVOLUTION_MODE["CROSS_CORRELATION"],
        "math": fma,
    }
    assert ("cudnnSetConvolutionGroupCount", (conv_desc, 1)) in lib.calls
    assert ("cudnnSetStream", (0x77, 0x5000)) not in lib.calls  # the handle came from the fixture

    lib.calls.clear()
    by_name["WINOGRAD"].launch()  # one call, on the stream, nothing else
    ((name, args),) = lib.calls
    assert name == "cudnnConvolutionForward" and args[7] == cl.FWD_ALGO["WINOGRAD"] and args[9] == 4096
    assert not any(n.startswith("cudnnFind") for n in lib.names())


def test_conv_transpose_through_the_bindings(fake: tuple[FakeCudnn, FakeContext, cl.CudnnHandle]) -> None:
    lib, ctx, handle = fake
    p = conv(x=(1, 4, 5, 5), w=(4, 3, 3, 3), y=(1, 3, 7, 7), pads_begin=(0, 0), pads_end=(0, 0), transpose=True)
    candidates = cl.conv_candidates(ctx, handle, p, tensor_cores=False)
    # The fake's heuristic answers nothing: every backward-data algorithm, unranked, none the default.
    assert [c.name for c in candidates] == [f"bwd_data:{name}" for name in cl.BWD_DATA_ALGO]
    assert not any(c.default for c in candidates) and all(c.heuristic_rank is None for c in candidates)
    lib.calls.clear()
    candidates[1].launch()
    ((name, args),) = lib.calls
    assert name == "cudnnConvolutionBackwardData" and args[7] == cl.BWD_DATA_ALGO["ALGO_1"]
    assert lib.filters[args[2]] == [4, 3, 3, 3]
    assert (lib.tensors[args[4]], lib.tensors[args[11]]) == ([1, 4, 5, 5], [1, 3, 7, 7])  # dy is x, dx is y


def test_a_refused_launch_raises_the_library_error(fake: tuple[FakeCudnn, FakeContext, cl.CudnnHandle]) -> None:
    lib, ctx, handle = fake
    lib.heuristic = [(1, 0, cl.MATH_TYPE["DEFAULT_MATH"])]
    (first, *_) = cl.conv_candidates(ctx, handle, conv(), tensor_cores=True)
    assert first.name == "IMPLICIT_PRECOMP_GEMM" and first.tensor_cores is None  # TF32 may be used, unreported
    lib.refuse = {1}
    with pytest.raises(LibraryCallError) as caught:
        first.launch()
    message = str(caught.value)
    assert message.startswith("cudnnConvolutionForward failed: CUDNN_STATUS_NOT_SUPPORTED")
    assert "fake: this geometry is not supported" in message and "\n" not in message


def test_no_algorithm_that_runs_is_an_unsupported_layer(fake: tuple[FakeCudnn, FakeContext, cl.CudnnHandle]) -> None:
    lib, ctx, handle = fake
    lib.refuse = set(range(cl.FWD_ALGO_COUNT))
    with pytest.raises(UnsupportedLayer, match=r"no cuDNN fused convolution\+bias\+activation algorithm"):
        cl.conv_bias_activation_candidates(ctx, handle, conv(bias=True, activation="relu"), tensor_cores=False)
    with pytest.raises(UnsupportedLayer, match="asymmetric pads"):
        cl.conv_candidates(ctx, handle, conv(pads_end=(2, 2), y=(1, 4, 9, 9)), tensor_cores=False)


def test_fused_candidates_bind_bias_and_activation(fake: tuple[FakeCudnn, FakeContext, cl.CudnnHandle]) -> None:
    lib, ctx, handle = fake
    lib.heuristic = [(1, 0, cl.MATH_TYPE["TENSOR_OP_MATH"])]
    candidates = cl.conv_bias_activation_candidates(
        ctx, handle, conv(dtype="float16", bias=True, activation="clipped_relu", activation_coef=6.0), True
    )
    assert candidates[0].name == "fused:IMPLICIT_PRECOMP_GEMM/tensor_op" and candidates[0].default
    assert candidates[0].tensor_cores is True
    assert ((4,), "float16", "random") in ctx.arrays
    activation = next(args for name, args in lib.calls if name == "cudnnSetActivationDescriptor")
    assert activation[1:] == (cl.ACTIVATION_MODE["CLIPPED_RELU"], cl.NAN_PROPAGATION["PROPAGATE_NAN"], 6.0)
    bias = [lib.tensors[args[0]] for name, args in lib.calls if name == "cudnnSetTensorNdDescriptor"][-1]
    assert bias == [1, 4, 1, 1]


def test_single_call_layers_through_the_bindings(fake: tuple[FakeCudnn, FakeContext, cl.CudnnHandle]) -> None:
    lib, ctx, handle = fake
    pool = PoolParams("avg_exclude_pad", (1, 2, 9), (1, 2, 5), (3,), (1,), (2,), "float32")
    (candidate,) = cl.pooling_candidates(ctx, handle, pool)
    assert candidate.name == "AVERAGE_COUNT_EXCLUDE_PADDING" and candidate.default
    window = next(args for name, args in lib.calls if name == "cudnnSetPoolingNdDescriptor")
    assert window[1] == cl.POOLING_MODE["AVERAGE_COUNT_EXCLUDE_PADDING"] and window[3] == 2
    with pytest.raises(UnsupportedLayer, match="cuDNN pools"):
        cl.pooling_candidates(ctx, handle, PoolParams("max", (1, 2, 9), (1, 2, 4), (3,), (1,), (2,), "float32"))
    soft = cl.softmax_candidates(ctx, handle, SoftmaxParams(4, 10, 1, True, "float16"))
    assert [c.name for c in soft] == ["LOG/CHANNEL"]
    assert [c.name for c in cl.activation_candidates(ctx, handle, ActivationParams("elu", (2, 5), "float32", 0.5))] == [
        "ELU"
    ]
    assert cl.lrn_candidates(ctx, handle, LrnParams((1, 8, 5, 5), 5, 1e-4, 0.75, 2.0, "float32"))[0].default
    (bn,) = cl.batchnorm_candidates(ctx, handle, BatchNormParams((2, 8, 3), 1e-5, "float16"))
    assert bn.name == "SPATIAL" and [a for a in ctx.arrays if a[0] == (8,)] == [
        ((8,), "float32", "random"),
        ((8,), "float32", "random"),
        ((8,), "float32", "random"),
        ((8,), "float32", "ones"),
    ]
    lib.calls.clear()
    bn.launch()
    ((name, args),) = lib.calls
    assert name == "cudnnBatchNormalizationForwardInference" and args[1] == cl.BATCHNORM_MODE["SPATIAL"]
    assert args[-1] == pytest.approx(1e-5)
    assert cl.cudnn_version() == "9.10.2" and cl.cudnn_library_path() == "/fake/libcudnn.so.9"


# ------------------------------------------------------------------ on a GPU


@pytest.fixture
def gpu() -> Iterator[tuple[Any, cl.CudnnHandle]]:
    from benanza.runtimes.cuda.device import DeviceContext

    ctx = DeviceContext(0)
    handle = cl.CudnnHandle(ctx)
    try:
        yield ctx, handle
    finally:
        handle.close()
        ctx.close()


def _host(ctx: Any, *arrays: Any) -> list[np.ndarray]:
    ctx.synchronize()
    return [np.asarray(a.get(), dtype=np.float64) for a in arrays]


def _poison(ctx: Any, array: Any) -> None:
    """Fill an output with NaN on the benchmark stream, so a candidate that writes nothing fails the check."""
    with ctx.stream:
        array.fill(np.nan)


def _conv2d_reference(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    r, s = w.shape[2:]
    oh, ow = xp.shape[2] - r + 1, xp.shape[3] - s + 1
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(r):
        for j in range(s):
            y += np.einsum("nchw,kc->nkhw", xp[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    return y


@pytest.mark.gpu
def test_conv_candidates_run_and_match_numpy(gpu: tuple[Any, cl.CudnnHandle]) -> None:
    ctx, handle = gpu
    p = conv()
    x, w, y = ctx.array(p.x, "float32"), ctx.array(p.w, "float32"), ctx.array(p.y, "float32", fill="zeros")
    candidates = cl.conv_candidates(ctx, handle, p, tensor_cores=False, tensors={"x": x, "w": w, "y": y})
    assert sum(c.default for c in candidates) == 1
    assert all(c.source == "cudnn-legacy" and c.workspace_bytes >= 0 for c in candidates)
    assert not any(c.tensor_cores for c in candidates)  # FMA_MATH: no tensor cores
    assert len({c.name for c in candidates}) == len(candidates)
    assert sum("find_ex_pick" in c.notes for c in candidates) <= 1
    xh, wh = _host(ctx, x, w)
    expected = _conv2d_reference(xh, wh, pad=1)
    for candidate in candidates:
        _poison(ctx, y)
        candidate.launch()
        ctx.synchronize()
        (got,) = _host(ctx, y)
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3, err_msg=candidate.name)


@pytest.mark.gpu
def test_conv_transpose_runs_backward_data(gpu: tuple[Any, cl.CudnnHandle]) -> None:
    ctx, handle = gpu
    p = conv(x=(1, 4, 5, 5), w=(4, 3, 3, 3), y=(1, 3, 7, 7), pads_begin=(0, 0), pads_end=(0, 0), transpose=True)
    x, w, y = ctx.array(p.x, "float32"), ctx.array(p.w, "float32"), ctx.array(p.y, "float32", fill="zeros")
    candidates = cl.conv_candidates(ctx, handle, p, tensor_cores=False, tensors={"x": x, "w": w, "y": y})
    assert candidates and all(c.name.startswith("bwd_data:") for c in candidates)
    xh, wh = _host(ctx, x, w)
    expected = np.zeros(p.y)
    for i in range(3):
        for j in range(3):
            expected[:, :, i : i + 5, j : j + 5] += np.einsum("nchw,cd->ndhw", xh, wh[:, :, i, j])
    for candidate in candidates:
        _poison(ctx, y)
        candidate.launch()
        (got,) = _host(ctx, y)
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3, err_msg=candidate.name)


@pytest.mark.gpu
def test_fused_conv_bias_relu(gpu: tuple[Any, cl.CudnnHandle]) -> None:
    ctx, handle = gpu
    p = conv(bias=True, activation="relu")
    x, w, y = ctx.array(p.x, "float32"), ctx.array(p.w, "float32"), ctx.array(p.y, "float32", fill="zeros")
    bias = ctx.array((4,), "float32")
    tensors = {"x": x, "w": w, "y": y, "bias": bias}
    candidates = cl.conv_bias_activation_candidates(ctx, handle, p, tensor_cores=False, tensors=tensors)
    assert candidates and all(c.name.startswith("fused:") for c in candidates)
    xh, wh, bh = _host(ctx, x, w, bias)
    expected = np.maximum(_conv2d_reference(xh, wh, pad=1) + bh[None, :, None, None], 0.0)
    for candidate in candidates:
        _poison(ctx, y)
        candidate.launch()
        (got,) = _host(ctx, y)
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3, err_msg=candidate.name)


@pytest.mark.gpu
def test_pooling_softmax_and_batchnorm_match_numpy(gpu: tuple[Any, cl.CudnnHandle]) -> None:
    ctx, handle = gpu
    pool = PoolParams("max", (1, 2, 4, 4), (1, 2, 2, 2), (2, 2), (0, 0), (2, 2), "float32")
    x, y = ctx.array(pool.x, "float32"), ctx.array(pool.y, "float32", fill="zeros")
    (candidate,) = cl.pooling_candidates(ctx, handle, pool, tensors={"x": x, "y": y})
    assert candidate.default and candidate.name == "MAX"
    candidate.launch()
    xh, got = _host(ctx, x, y)
    np.testing.assert_allclose(got, xh.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5)), rtol=1e-6)

    soft = SoftmaxParams(outer=2, dim=5, inner=3, log=False, dtype="float32")
    x, y = ctx.array(soft.x, "float32"), ctx.array(soft.x, "float32", fill="zeros")
    candidates = cl.softmax_candidates(ctx, handle, soft, tensors={"x": x, "y": y})
    assert [c.name for c in candidates] == ["ACCURATE/CHANNEL", "FAST/CHANNEL"] and candidates[0].default
    (xh,) = _host(ctx, x)
    e = np.exp(xh - xh.max(axis=1, keepdims=True))
    for candidate in candidates:
        _poison(ctx, y)
        candidate.launch()
        (got,) = _host(ctx, y)
        np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6)

    bn = BatchNormParams((2, 3, 4, 4), 1e-5, "float32")
    roles = {"x": bn.x, "y": bn.x, "scale": (3,), "bias": (3,), "mean": (3,), "var": (3,)}
    arrays = {
        role: ctx.array(shape, "float32", fill="ones" if role == "var" else "random") for role, shape in roles.items()
    }
    (candidate,) = cl.batchnorm_candidates(ctx, handle, bn, tensors=arrays)
    candidate.launch()
    xh, got, scale, shift, mean, var = _host(ctx, *(arrays[r] for r in ("x", "y", "scale", "bias", "mean", "var")))
    c = (slice(None), None, None)
    expected = scale[c] * (xh - mean[c]) / np.sqrt(var[c] + 1e-5) + shift[c]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_library_facts(gpu: tuple[Any, cl.CudnnHandle]) -> None:
    assert cl.cudnn_version().startswith("9.")
    assert Path(cl.cudnn_library_path()).name.startswith("libcudnn.so.9")
