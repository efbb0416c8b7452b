"""benanza's cuDNN bindings against the real cuDNN 9 library and its headers: no GPU needed.

Wherever ``libcudnn.so.9`` can be loaded (``pip install nvidia-cudnn-cu13``; CI installs it),
these tests check what the GPU tests cannot check on a machine without a GPU:

- every function benanza binds has the C signature of cuDNN's own headers (a wrong
  argument type or count would corrupt the stack silently under ctypes), every enum
  value and limit benanza hard-codes is the header's, and the perf-result struct has the
  header's layout;
- every layer and fused chain of the zoo gets its descriptors from the library itself
  (descriptor calls run on the host), and cuDNN's own shape rules
  (``cudnnGetConvolutionNdForwardOutputDim``, ``cudnnGetPoolingNdForwardOutputDim``) give
  the layer's output shape, in every precision the runtime offers;
- asking for a handle with no GPU fails with cuDNN's reason, not a crash.

Without the library they are skipped, with the reason.
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cheaders import Headers, canonical_ctypes, read_headers
from conftest import ZOO_MODELS

from benanza.errors import GpuError, LibraryCallError, UnsupportedLayer
from benanza.model.network import network_of
from benanza.runtimes.cuda import cudnn_graph
from benanza.runtimes.cuda import cudnn_legacy as cl
from benanza.runtimes.cuda.fusion import fused_groups
from benanza.runtimes.cuda.params import (
    ActivationParams,
    BatchNormParams,
    ConvParams,
    GemmParams,
    LrnParams,
    PoolParams,
    SoftmaxParams,
    Unsupported,
    fused_conv,
    layer_params,
)
from benanza.runtimes.cuda.runtime import PRECISIONS


@pytest.fixture(scope="module")
def cudnn() -> str:
    """The path of the loaded libcudnn.so.9; the module is skipped where it cannot be loaded."""
    try:
        return cl.cudnn_library_path()
    except GpuError as exc:
        pytest.skip(f"cuDNN 9 is not installed here: {exc}")


@pytest.fixture(scope="module")
def headers(cudnn: str) -> Headers:
    """The C declarations of the installed cuDNN's headers (the wheel ships them beside lib/)."""
    include = Path(cudnn).resolve().parent.parent / "include"
    files = sorted(include.glob("cudnn_*_v9.h"))
    if not files:
        pytest.skip(f"no cuDNN 9 headers at {include}")
    return read_headers(files)


# ------------------------------------------------------------------ the bindings are the headers'


def test_every_bound_function_has_the_signature_of_the_headers(headers: Headers) -> None:
    signatures = cl._signatures()
    assert len(signatures) >= 40
    wrong = {}
    for name, (restype, argtypes) in signatures.items():
        assert name in headers.prototypes, f"{name} is not declared in the cuDNN headers"
        ret, args = headers.prototypes[name]
        ours = (canonical_ctypes(restype), [canonical_ctypes(a) for a in argtypes])
        if ours != (ret, args):
            wrong[name] = {"benanza": ours, "header": (ret, args)}
    assert not wrong


def test_every_bound_function_is_exported_by_the_library(cudnn: str) -> None:
    lib = cl._library()
    missing = [name for name in cl._signatures() if not hasattr(lib, name)]
    assert not missing, f"{cudnn} lacks {missing}"


def test_the_perf_struct_has_the_layout_of_both_perf_result_types(headers: Headers) -> None:
    ours = [(name, canonical_ctypes(t)) for name, t in cl._perf_struct()._fields_]
    assert headers.structs["cudnnConvolutionFwdAlgoPerf_t"] == ours
    assert headers.structs["cudnnConvolutionBwdDataAlgoPerf_t"] == ours


@pytest.mark.parametrize(
    ("table", "enum", "prefix"),
    [
        (cl.DATA_TYPE, "cudnnDataType_t", "CUDNN_DATA_"),
        (cl.MATH_TYPE, "cudnnMathType_t", "CUDNN_"),
        (cl.TENSOR_FORMAT, "cudnnTensorFormat_t", "CUDNN_TENSOR_"),
        (cl.CONVOLUTION_MODE, "cudnnConvolutionMode_t", "CUDNN_"),
        (cl.NAN_PROPAGATION, "cudnnNanPropagation_t", "CUDNN_"),
        (cl.ACTIVATION_MODE, "cudnnActivationMode_t", "CUDNN_ACTIVATION_"),
        (cl.FWD_ALGO, "cudnnConvolutionFwdAlgo_t", "CUDNN_CONVOLUTION_FWD_ALGO_"),
        # CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 beside CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: ALGO_0 and FFT here
        (
            cl.BWD_DATA_ALGO,
            "cudnnConvolutionBwdDataAlgo_t",
            "CUDNN_CONVOLUTION_BWD_DATA_ALGO_|CUDNN_CONVOLUTION_BWD_DATA_",
        ),
        (cl.POOLING_MODE, "cudnnPoolingMode_t", "CUDNN_POOLING_"),
        (cl.SOFTMAX_ALGORITHM, "cudnnSoftmaxAlgorithm_t", "CUDNN_SOFTMAX_"),
        (cl.SOFTMAX_MODE, "cudnnSoftmaxMode_t", "CUDNN_SOFTMAX_MODE_"),
        (cl.BATCHNORM_MODE, "cudnnBatchNormMode_t", "CUDNN_BATCHNORM_"),
        (cl.LRN_MODE, "cudnnLRNMode_t", "CUDNN_LRN_"),
    ],
)
def test_every_enum_value_is_the_headers(headers: Headers, table: dict[str, int], enum: str, prefix: str) -> None:
    members = headers.enums[enum]
    prefixes = prefix.split("|")
    found = {name: next((members[p + name] for p in prefixes if p + name in members), None) for name in table}
    assert found == table


def test_algorithm_counts_and_limits_are_the_headers(headers: Headers) -> None:
    fwd, bwd = headers.enums["cudnnConvolutionFwdAlgo_t"], headers.enums["cudnnConvolutionBwdDataAlgo_t"]
    assert fwd["CUDNN_CONVOLUTION_FWD_ALGO_COUNT"] == cl.FWD_ALGO_COUNT == len(cl.FWD_ALGO)
    assert bwd["CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT"] == cl.BWD_DATA_ALGO_COUNT == len(cl.BWD_DATA_ALGO)
    d = headers.defines
    assert int(d["CUDNN_DIM_MAX"]) == cl.DIM_MAX
    assert (int(d["CUDNN_LRN_MIN_N"]), int(d["CUDNN_LRN_MAX_N"])) == (cl.LRN_MIN_N, cl.LRN_MAX_N)
    assert (float(d["CUDNN_LRN_MIN_K"]), float(d["CUDNN_LRN_MIN_BETA"])) == (cl.LRN_MIN_K, cl.LRN_MIN_BETA)
    assert float(d["CUDNN_BN_MIN_EPSILON"]) == cl.BN_MIN_EPSILON


def test_every_status_of_the_headers_has_its_name(headers: Headers) -> None:
    """Names benanza knows are the headers'; a status added by a later cuDNN is named by its category."""
    statuses = headers.enums["cudnnStatus_t"]
    for value, name in cl.STATUS_NAMES.items():
        assert statuses[name] == value
    for value in set(statuses.values()) - set(cl.STATUS_NAMES):
        assert cl.status_name(value) == f"{cl.STATUS_NAMES[value // 1000 * 1000]}({value})"


def test_the_library_reports_its_version_and_names_its_statuses(cudnn: str) -> None:
    version = cl.cudnn_version()
    assert version.startswith("9.")
    text = cl._function("cudnnGetErrorString")(2000).decode()
    assert "BAD_PARAM" in text


def test_a_handle_without_a_gpu_fails_with_cudnns_reason(cudnn: str, no_gpu: None) -> None:
    handle = ctypes.c_void_p()
    with pytest.raises(LibraryCallError) as caught:
        cl._check("cudnnCreate", ctypes.byref(handle))
    assert caught.value.status == "CUDNN_STATUS_NOT_INITIALIZED" or "NOT_SUPPORTED" in caught.value.status


# ------------------------------------------------------------------ the zoo's descriptors, by the library


def _zoo_calls(
    zoo_model: Callable[..., Any], batch: int, precision: str = "float32"
) -> Iterator[tuple[str, Any, bool]]:
    """(where, params, fused) of every execution unit of the zoo, as the GPU runtime plans them in ``precision``."""
    for name in ZOO_MODELS:
        graph = zoo_model(name, batch=batch).graph
        for group in fused_groups(graph):
            network = network_of(graph, group)[1]
            if len(group) > 1:
                yield f"{name} layers {group}", fused_conv(network, precision), True
            else:
                where = f"{name} layer {group[0]} ({graph.layers[group[0]].op_type})"
                yield where, layer_params(network, 0, precision), False


def _describe(p: Any, fused: bool, tensor_cores: bool) -> str:
    """Build the legacy API's descriptors of one call through the library; what was built."""
    if isinstance(p, ConvParams):
        d = cl.conv_descriptors(p, tensor_cores, fused)
        d.conv(cl.MATH_TYPE["FMA_MATH"])  # the math types the algorithm loop asks for, beside the requested one
        d.conv(cl.MATH_TYPE["TENSOR_OP_MATH"])
        return "conv-transpose" if p.transpose else "fused-conv" if fused else "conv"
    builders: dict[type, Callable[[Any], object]] = {
        PoolParams: cl.pooling_descriptors,
        LrnParams: cl.lrn_descriptors,
        SoftmaxParams: cl.softmax_descriptor,
        ActivationParams: cl.activation_descriptors,
        BatchNormParams: cl.batchnorm_descriptors,
    }
    build = builders.get(type(p))
    if build is None:
        return "not a cuDNN legacy call"
    build(p)
    return type(p).__name__


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("batch", [1, 32])
def test_every_zoo_call_gets_its_descriptors_and_output_shape_from_cudnn(
    cudnn: str, zoo_model: Callable[..., Any], batch: int, precision: str
) -> None:
    built: Counter[str] = Counter()
    refused = {}
    for where, p, fused in _zoo_calls(zoo_model, batch, precision):
        if isinstance(p, Unsupported):
            refused[where] = p.reason
            continue
        try:
            built[_describe(p, fused, tensor_cores=True)] += 1
        except (UnsupportedLayer, LibraryCallError) as exc:
            refused[where] = str(exc)
    assert not refused
    # 339 fused chains, 62 lone convolutions, 54 pools, 6 LRNs, 8 softmaxes, 62 batchnorms, 228 activations
    assert built["fused-conv"] > 300 and built["conv"] > 50 and built["PoolParams"] > 40
    assert built["LrnParams"] and built["SoftmaxParams"] and built["BatchNormParams"] and built["ActivationParams"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_convolutions_of_resnet50_are_described_in_every_precision(
    cudnn: str, zoo_model: Callable[..., Any], precision: str
) -> None:
    graph = zoo_model("resnet50", batch=8).graph
    described = 0
    for group in fused_groups(graph):
        p = fused_conv(network_of(graph, group)[1], precision) if len(group) > 1 else None
        if isinstance(p, ConvParams):
            for tensor_cores in (True, False):
                d = cl.conv_descriptors(p, tensor_cores, fused=True)
                assert d.requested_math == cl.math_type(precision, tensor_cores)
            described += 1
    assert described == 53


def test_cudnn_refuses_a_pool_whose_output_shape_it_computes_otherwise(cudnn: str) -> None:
    pool = PoolParams(
        mode="max", x=(1, 4, 8, 8), y=(1, 4, 4, 4), window=(2, 2), pads=(0, 0), strides=(2, 2), dtype="float32"
    )
    assert len(cl.pooling_descriptors(pool)) == 3
    with pytest.raises(UnsupportedLayer, match=r"cuDNN pools x \(1, 4, 8, 8\) to \(1, 4, 4, 4\), the layer has"):
        cl.pooling_descriptors(dataclasses.replace(pool, y=(1, 4, 5, 5)))


def test_cudnn_rejects_a_bad_descriptor_with_its_status_and_message(cudnn: str) -> None:
    with pytest.raises(LibraryCallError) as caught:
        cl.TensorDescriptor((1, 0, 8, 8))  # a zero extent
    assert caught.value.status.startswith("CUDNN_STATUS_BAD_PARAM")


# ------------------------------------------------------------------ the zoo's operation graphs, by the frontend


@pytest.fixture(scope="module")
def frontend(cudnn: str) -> Any:
    """The cuDNN frontend's module, on the libcudnn benanza loaded; skipped where it is not installed."""
    try:
        return cudnn_graph._import_cudnn()
    except GpuError as exc:
        pytest.skip(str(exc))


def _graph_of(frontend: Any, p: Any) -> str | None:
    if isinstance(p, ConvParams) and not p.transpose:
        cudnn_graph.conv_graph(frontend, p)
        return "conv"
    if isinstance(p, GemmParams):
        cudnn_graph.matmul_graph(frontend, p)
        return "matmul"
    if isinstance(p, BatchNormParams):
        cudnn_graph.batchnorm_graph(frontend, p)
        return "batchnorm"
    return None


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("batch", [1, 32])
def test_every_zoo_call_builds_its_operation_graph_and_the_frontend_infers_its_shape(
    frontend: Any, zoo_model: Callable[..., Any], batch: int, precision: str
) -> None:
    built: Counter[str | None] = Counter()
    refused = {}
    for where, p, _fused in _zoo_calls(zoo_model, batch, precision):
        if isinstance(p, Unsupported):
            continue  # the legacy test reports these
        try:
            built[_graph_of(frontend, p)] += 1
        except UnsupportedLayer as exc:
            refused[where] = str(exc)
    assert not refused
    assert built["conv"] > 350 and built["matmul"] >= 9 and built["batchnorm"]


def test_an_output_shape_the_frontend_infers_otherwise_is_refused(frontend: Any) -> None:
    p = ConvParams(
        x=(1, 3, 8, 8),
        w=(4, 3, 3, 3),
        y=(1, 4, 8, 8),
        pads_begin=(1, 1),
        pads_end=(1, 1),
        strides=(1, 1),
        dilations=(1, 1),
        groups=1,
        dtype="float32",
        bias=True,
        activation="relu",
    )
    g = cudnn_graph.conv_graph(frontend, p)
    assert [op.name for op in g.operands] == ["x", "w", "bias", "y"]
    y = g.operands[-1].tensor
    assert list(y.get_dim()) == [1, 4, 8, 8] and list(y.get_stride()) == [256, 1, 32, 4]  # NHWC
    graph = frontend.pygraph()
    x = graph.tensor(name="x", dim=[1, 3, 8, 8], stride=[192, 1, 24, 3], data_type=frontend.data_type.FLOAT)
    w = graph.tensor(name="w", dim=[4, 3, 3, 3], stride=[27, 1, 9, 3], data_type=frontend.data_type.FLOAT)
    out = graph.conv_fprop(image=x, weight=w, pre_padding=[0, 0], post_padding=[0, 0], stride=[1, 1], dilation=[1, 1])
    with pytest.raises(
        UnsupportedLayer, match=r"infers the convolution as \[1, 4, 6, 6\], the layer has \[1, 4, 8, 8\]"
    ):
        cudnn_graph._shape_output(out, (1, 4, 8, 8), "nhwc", "the convolution")
