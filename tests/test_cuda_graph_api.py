"""The cuDNN graph API source: layouts, data types, geometry and names on the CPU; every plan on the device.

The CPU tests cover what is decided before the frontend is called (packed strides in NCHW
and NHWC, the data-type table, a convolution's geometry as the graph API receives it, the
fused activation's pointwise op, candidate names, storage-order views). The ``gpu`` tests
build real graphs, launch every plan that builds and compare with NumPy references.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from benanza.errors import GpuError, UnsupportedLayer
from benanza.runtimes.cuda.cudnn_graph import (
    GRAPH_DATA_TYPES,
    GraphPlans,
    activation_call,
    candidate_name,
    conv_geometry,
    graph_conv_candidates,
    graph_data_types,
    graph_matmul_candidates,
    order_of_strides,
    packed_strides,
    storage_order,
)
from benanza.runtimes.cuda.params import BatchNormParams, ConvParams, GemmParams


def conv(x, w, y, pads_begin=(0, 0), pads_end=(0, 0), strides=(1, 1), dilations=(1, 1), groups=1, **kw):
    return ConvParams(x, w, y, pads_begin, pads_end, strides, dilations, groups, kw.pop("dtype", "float32"), **kw)


# ------------------------------------------------------------------------ layouts


def test_packed_strides_nchw_and_nhwc():
    assert packed_strides((2, 3, 4, 5), "nchw") == (60, 20, 5, 1)
    assert packed_strides((2, 3, 4, 5), "nhwc") == (60, 1, 15, 3)
    assert packed_strides((2, 3, 4, 5, 6), "nhwc") == (360, 1, 90, 18, 3)  # NDHWC
    assert packed_strides((2, 3, 7), "nhwc") == (21, 1, 3)  # NWC
    assert packed_strides((1, 8, 1, 1), "nhwc") == (8, 1, 8, 8)  # a per-channel bias
    assert packed_strides((4, 5, 6), "nchw") == (30, 6, 1)  # a row-major batch of matrices
    with pytest.raises(ValueError, match="layout"):
        packed_strides((2, 3), "chwn")


def test_storage_order_round_trips_through_strides():
    for dims in [(2, 3, 4, 5), (2, 3, 4, 5, 6), (2, 3, 7)]:
        for layout in ("nchw", "nhwc"):
            assert order_of_strides(packed_strides(dims, layout)) == storage_order(len(dims), layout)
    assert storage_order(4, "nhwc") == (0, 2, 3, 1)
    assert order_of_strides((12, 1, 3)) == (0, 2, 1)  # a transposed (m, k) matrix: stored (k, m)


def test_logical_view_of_a_channels_last_array_has_nhwc_strides():
    dims = (2, 3, 4, 5)
    order = storage_order(4, "nhwc")
    physical = np.arange(120.0).reshape(tuple(dims[a] for a in order))
    plans = GraphPlans(graph=None, layout="nhwc", arrays={"x": physical}, storage_orders={"x": order})
    view = plans.logical("x")
    assert view.shape == dims
    assert tuple(s // view.itemsize for s in view.strides) == packed_strides(dims, "nhwc")
    assert view[1, 2, 3, 4] == physical[1, 3, 4, 2]


def test_data_type_table_and_names():
    assert GRAPH_DATA_TYPES == {
        "float32": ("FLOAT", "FLOAT", "FLOAT"),
        "float16": ("HALF", "FLOAT", "FLOAT"),
        "bfloat16": ("BFLOAT16", "FLOAT", "FLOAT"),
    }
    assert graph_data_types("float16") == ("HALF", "FLOAT", "FLOAT")
    with pytest.raises(UnsupportedLayer, match="float64"):
        graph_data_types("float64")
    assert candidate_name("nhwc", "eng0_k2=1_k3=0") == "nhwc:eng0_k2=1_k3=0"


def test_data_type_names_exist_in_the_frontend():
    cudnn = pytest.importorskip("cudnn", exc_type=ImportError)
    for names in GRAPH_DATA_TYPES.values():
        for name in names:
            assert hasattr(cudnn.data_type, name)


# ------------------------------------------------------------------------ geometry


def test_conv_geometry_keeps_asymmetric_padding():
    p = conv((1, 4, 8, 8), (6, 4, 3, 3), (1, 6, 4, 8), (0, 1), (1, 1), strides=(2, 1))
    geo = conv_geometry(p)
    assert (geo.pre_padding, geo.post_padding, geo.stride, geo.dilation) == ((0, 1), (1, 1), (2, 1), (1, 1))
    assert geo.bias == (1, 6, 1, 1)


def test_conv_geometry_promotes_1d_to_2d():
    geo = conv_geometry(conv((2, 3, 10), (4, 3, 3), (2, 4, 5), (1,), (0,), strides=(2,), dilations=(1,)))
    assert (geo.x, geo.w, geo.y) == ((2, 3, 1, 10), (4, 3, 1, 3), (2, 4, 1, 5))
    assert (geo.pre_padding, geo.post_padding, geo.stride, geo.dilation) == ((0, 1), (0, 0), (1, 2), (1, 1))


def test_grouped_and_depthwise_convolutions_are_expressed_by_the_weight():
    grouped = conv_geometry(conv((1, 8, 5, 5), (12, 2, 3, 3), (1, 12, 3, 3), groups=4))
    assert grouped.w == (12, 2, 3, 3)
    depthwise = conv_geometry(conv((1, 8, 5, 5), (8, 1, 3, 3), (1, 8, 5, 5), (1, 1), (1, 1), groups=8))
    assert depthwise.y == (1, 8, 5, 5)


def test_conv_geometry_rejects_what_it_cannot_run():
    with pytest.raises(UnsupportedLayer, match="ConvTranspose"):
        conv_geometry(conv((1, 4, 5, 5), (4, 2, 3, 3), (1, 2, 7, 7), transpose=True))
    with pytest.raises(UnsupportedLayer, match="channel counts"):
        conv_geometry(conv((1, 8, 5, 5), (12, 3, 3, 3), (1, 12, 3, 3), groups=4))
    with pytest.raises(UnsupportedLayer, match="does not follow"):
        conv_geometry(conv((1, 4, 5, 5), (6, 4, 3, 3), (1, 6, 5, 5)))


def test_activation_calls():
    assert activation_call(None) is None and activation_call("identity") is None
    assert activation_call("relu") == ("relu", {})
    assert activation_call("clipped_relu", 6.0) == ("relu", {"lower_clip": 0.0, "upper_clip": 6.0})
    assert activation_call("sigmoid") == ("sigmoid", {})
    assert activation_call("tanh") == ("tanh", {})
    assert activation_call("elu", 1.0) == ("elu", {})
    with pytest.raises(UnsupportedLayer, match=r"alpha 0\.5"):
        activation_call("elu", 0.5)
    with pytest.raises(UnsupportedLayer, match="swish"):
        activation_call("swish")


def test_activation_names_are_frontend_methods():
    cudnn = pytest.importorskip("cudnn", exc_type=ImportError)
    for activation in ("relu", "clipped_relu", "sigmoid", "tanh", "elu"):
        name, _ = activation_call(activation, 1.0)
        assert callable(getattr(cudnn.pygraph, name))


def test_what_is_refused_before_the_frontend_is_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "cudnn", None)  # the frontend absent, as on CI
    with pytest.raises(UnsupportedLayer, match="alpha"):
        graph_matmul_candidates(None, GemmParams(1, 4, 4, 4, False, False, "float32", alpha=2.0), True)
    with pytest.raises(GpuError, match="nvidia-cudnn-frontend"):
        graph_conv_candidates(None, conv((1, 4, 5, 5), (6, 4, 3, 3), (1, 6, 3, 3)), True)


# ------------------------------------------------------------------------ on the device


def conv2d_reference(x, w, pre, post, stride, dilation, groups):
    """Cross-correlation as ONNX's Conv defines it, in float64, NCHW."""
    n, _, h, wd = x.shape
    k, cg, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pre[0], post[0]), (pre[1], post[1])))
    ho = (h + pre[0] + post[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    wo = (wd + pre[1] + post[1] - dilation[1] * (s - 1) - 1) // stride[1] + 1
    y = np.zeros((n, k, ho, wo))
    kg = k // groups
    for g in range(groups):
        for i in range(r):
            for j in range(s):
                top, left = i * dilation[0], j * dilation[1]
                patch = xp[
                    :,
                    g * cg : (g + 1) * cg,
                    top : top + stride[0] * (ho - 1) + 1 : stride[0],
                    left : left + stride[1] * (wo - 1) + 1 : stride[1],
                ]
                y[:, g * kg : (g + 1) * kg] += np.einsum("nchw,kc->nkhw", patch, w[g * kg : (g + 1) * kg, :, i, j])
    return y


def host(plans, name):
    import cupy

    return cupy.asnumpy(plans.logical(name)).astype(np.float64)


@pytest.fixture(scope="module")
def ctx():
    from benanza.runtimes.cuda.device import DeviceContext

    context = DeviceContext(0)
    yield context
    context.close()


def launch_each(ctx, plans, check):
    assert plans.candidates and plans.candidates[0].default
    assert sum(c.default for c in plans.candidates) == 1
    for candidate in plans.candidates:
        with ctx.stream:
            plans.arrays[next(reversed(plans.arrays))].fill(0)  # the output, declared last
        candidate.launch()
        ctx.synchronize()
        check(candidate)


CONV_CASES = [
    pytest.param(
        conv((2, 8, 9, 9), (16, 8, 3, 3), (2, 16, 4, 8), (1, 0), (0, 1), strides=(2, 1), dilations=(1, 1)),
        "nhwc",
        False,
        1e-4,
        id="fp32-nhwc-asymmetric",
    ),
    pytest.param(conv((2, 8, 9, 9), (16, 8, 3, 3), (2, 16, 9, 9), (1, 1), (1, 1)), "nchw", False, 1e-4, id="fp32-nchw"),
    pytest.param(
        conv((1, 8, 10, 10), (12, 2, 3, 3), (1, 12, 6, 6), dilations=(2, 2), groups=4),
        "nhwc",
        False,
        1e-4,
        id="grouped",
    ),
    pytest.param(
        conv(
            (2, 16, 8, 8), (32, 16, 3, 3), (2, 32, 8, 8), (1, 1), (1, 1), dtype="float16", bias=True, activation="relu"
        ),
        "nhwc",
        True,
        2e-2,
        id="fp16-bias-relu",
    ),
    pytest.param(
        conv((2, 8, 6, 6), (8, 8, 1, 1), (2, 8, 6, 6), bias=True, activation="clipped_relu", activation_coef=0.5),
        "nhwc",
        True,
        3e-2,
        id="fp32-tf32-bias-relu6",
    ),
    pytest.param(conv((2, 4, 12), (6, 4, 3), (2, 6, 10), (0,), (0,), (1,), (1,)), "nhwc", False, 1e-4, id="conv1d"),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("p", "layout", "tensor_cores", "tol"), CONV_CASES)
def test_every_conv_plan_computes_the_convolution(ctx, p, layout, tensor_cores, tol):
    from benanza.runtimes.cuda.cudnn_graph import conv_graph_plans

    plans = conv_graph_plans(ctx, p, tensor_cores, layout=layout)
    assert all(c.source == "cudnn-graph" and c.name.startswith(f"{layout}:") for c in plans.candidates)
    if not tensor_cores:
        assert all(c.tensor_cores is False for c in plans.candidates)
    geo = conv_geometry(p)
    want = conv2d_reference(  # a 1-D convolution is 2-D with unit height in the graph (and its views)
        host(plans, "x"),
        host(plans, "w"),
        geo.pre_padding,
        geo.post_padding,
        geo.stride,
        geo.dilation,
        p.groups,
    )
    if p.bias:
        want = want + host(plans, "bias")
    if p.activation == "relu":
        want = np.maximum(want, 0.0)
    elif p.activation == "clipped_relu":
        want = np.clip(want, 0.0, p.activation_coef)

    def check(candidate):
        got = host(plans, "y")
        np.testing.assert_allclose(got, want.reshape(got.shape), rtol=tol, atol=tol * 8, err_msg=candidate.name)

    launch_each(ctx, plans, check)


MATMUL_CASES = [
    pytest.param(GemmParams(1, 32, 24, 40, False, True, "float32", beta=1.0, bias=True), False, 1e-4, id="fp32-fc"),
    pytest.param(GemmParams(4, 32, 16, 24, False, False, "float16", b_batched=False), True, 3e-2, id="fp16-shared-b"),
    pytest.param(GemmParams(2, 16, 16, 16, True, False, "float32"), True, 3e-2, id="fp32-tf32-trans-a"),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("p", "tensor_cores", "tol"), MATMUL_CASES)
def test_every_matmul_plan_computes_the_product(ctx, p, tensor_cores, tol):
    from benanza.runtimes.cuda.cudnn_graph import matmul_graph_plans

    try:
        plans = matmul_graph_plans(ctx, p, tensor_cores)
    except UnsupportedLayer as exc:
        # cuDNN 9.19 on an H200: every heuristic engine of a float32 matmul is a Tensor Core one and
        # is deselected without them; the layer then runs on cublasLt alone (the runtime's test below)
        assert not tensor_cores and p.dtype == "float32", exc
        assert "no cuDNN graph plan builds" in str(exc)
        return
    want = np.matmul(host(plans, "a"), host(plans, "b"))
    if p.bias:
        want = want + host(plans, "bias")

    def check(candidate):
        got = host(plans, "c")
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(p.k), err_msg=candidate.name)

    launch_each(ctx, plans, check)


@pytest.mark.gpu
def test_batchnorm_inference_plan_or_a_clear_skip(ctx):
    from benanza.runtimes.cuda.cudnn_graph import batchnorm_graph_plans

    p = BatchNormParams((2, 16, 7, 7), 1e-5, "float16")
    try:
        plans = batchnorm_graph_plans(ctx, p)
    except UnsupportedLayer as exc:
        assert "batchnorm" in str(exc)
        return
    x, mean, inv_std = host(plans, "x"), host(plans, "mean"), host(plans, "inv_std")
    want = (x - mean) * inv_std * host(plans, "scale") + host(plans, "bias")

    def check(candidate):
        np.testing.assert_allclose(host(plans, "y"), want, rtol=1e-2, atol=1e-2, err_msg=candidate.name)

    launch_each(ctx, plans, check)
