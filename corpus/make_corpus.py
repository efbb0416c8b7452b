"""Regenerate benanza's corpus of today's models: ``corpus/models/*.onnx``, structure only.

Each architecture is built from ``timm`` or ``transformers`` model code with random weights
(``pretrained=False``, configs constructed in code: nothing is downloaded) and exported by
PyTorch's CPU build through ``torch.onnx.export`` with symbolic batch (and sequence)
dimensions: by the TorchScript exporter (``dynamo=False``, opset 17), and, for the models
marked so, by the ``torch.export``-based exporter that is PyTorch's default since 2.9
(``dynamo=True``, its own opset and onnxscript's graph optimisation), since that is what a
user exporting today gets. Deployed variants are made from the
exported fp32 model: int8 by ONNX Runtime's quantizer (static QDQ and QOperator, calibrated
on random data; dynamic) and fp16 by onnxconverter-common. Every model is checked against
PyTorch (fp32 exports) and run by ONNX Runtime at batch 1 and 2 before it is written.

Models are written without their weight data: every tensor over 1 KiB goes to an external
data file that is then deleted (``onnx.save(..., save_as_external_data=True,
size_threshold=1024)``). Smaller tensors (shapes, axes, scales, zero points, small biases)
keep their values, since they decide what an op does. benanza loads such a model and
synthesises its weights (``benanza/model/load.py``). ``--keep-weights DIR`` also writes the
models with their data to DIR.

The script writes ``corpus/corpus.json`` (one entry per model: source, variant, inputs,
the shapes that bind them at batch 1) and the model table of ``corpus/README.md``.

Run with these versions (``pip install torch==2.13.0`` installs the CPU build from a local
wheel; then ``pip install -e '.[corpus]'`` and ``pip install --no-deps timm==1.0.31``):

    torch==2.13.0+cpu  timm==1.0.31  transformers==5.23.0  onnxconverter-common==1.16.0
    onnxruntime==1.32.0  onnx==1.23.2  numpy==2.x

timm imports torchvision at import time for its data pipeline and one norm class; the
registry's torchvision build does not load with the CPU torch (and ``pip install timm``
pulls it in), so timm is installed without dependencies and ``import_timm`` stubs those two
imports (the corpus uses neither).

Usage: ``python corpus/make_corpus.py [--only NAME ...] [--keep-weights DIR]``
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader

ROOT = Path(__file__).resolve().parent
MODELS = ROOT / "models"
MANIFEST = ROOT / "corpus.json"
README = ROOT / "README.md"
OPSET = 17
THRESHOLD = 1024  # bytes: larger tensors are weights, shipped without data
SEQUENCE = 128  # tokens, for the text models' symbolic sequence dimension
EXPORTERS = {
    "torchscript": "torch.onnx.export (TorchScript, dynamo=False)",
    "dynamo": "torch.onnx.export (torch.export, dynamo=True)",
}


# ------------------------------------------------------------------ imports


def import_timm() -> types.ModuleType:
    """``timm`` without torchvision (see the module docstring).

    ``timm.layers`` imports ``torchvision.ops.misc.FrozenBatchNorm2d`` (for its freezing
    utilities) and ``timm.models`` imports ``timm.data`` for its normalisation constants;
    ``timm.data`` itself imports torchvision's datasets and transforms. Both are stubbed while
    timm imports: a FrozenBatchNorm2d class, and ``timm.data`` holding only the constants of
    ``timm/data/constants.py``. The torchvision stub is removed afterwards, so transformers
    sees no torchvision.
    """
    import torch

    class FrozenBatchNorm2d(torch.nn.Module):
        def __init__(self, num_features: int, eps: float = 1e-5) -> None:
            super().__init__()
            self.eps = eps
            for name, init in (
                ("weight", torch.ones),
                ("bias", torch.zeros),
                ("running_mean", torch.zeros),
                ("running_var", torch.ones),
            ):
                self.register_buffer(name, init(num_features))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scale = self.weight * (self.running_var + self.eps).rsqrt()
            shift = self.bias - self.running_mean * scale
            return x * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)

    stubs = {name: types.ModuleType(name) for name in ("torchvision", "torchvision.ops", "torchvision.ops.misc")}
    stubs["torchvision.ops.misc"].FrozenBatchNorm2d = FrozenBatchNorm2d
    spec = importlib.util.find_spec("timm")
    if spec is None or spec.origin is None:
        raise SystemExit("timm is not installed: pip install -e '.[corpus]'")
    root = Path(spec.origin).parent
    const_spec = importlib.util.spec_from_file_location("timm.data.constants", root / "data" / "constants.py")
    constants = importlib.util.module_from_spec(const_spec)
    const_spec.loader.exec_module(constants)
    data = types.ModuleType("timm.data")
    data.__path__ = [str(root / "data")]
    data.__dict__.update({k: v for k, v in vars(constants).items() if k.isupper()})
    sys.modules.update(stubs)
    sys.modules.update({"timm.data": data, "timm.data.constants": constants})
    try:
        import timm
        import timm.layers

        timm.layers.set_fused_attn(False)  # explicit q*scale attention: the fp16 converter keeps it fp16
    finally:
        for name in stubs:
            sys.modules.pop(name, None)
    return timm


# ------------------------------------------------------------------ the architectures


@dataclass(frozen=True)
class Input:
    name: str
    dtype: str  # "float32" | "int64"
    dims: tuple[int | str, ...]  # symbolic dimensions by name
    high: int = 0  # int inputs: values in [0, high); 0 for masks (ones)


@dataclass(frozen=True)
class Arch:
    """One architecture: how to build it, its inputs, and which variants to make."""

    name: str
    family: str
    source: str  # the model code and config, for people
    build: Callable[[], Any]  # -> torch.nn.Module taking the inputs positionally, returning tensors
    inputs: tuple[Input, ...]
    outputs: tuple[str, ...]
    variants: tuple[str, ...] = ()  # besides fp32: int8_qdq, int8_qop, int8_dynamic, fp16
    note: str = ""
    sizes: dict[str, int] = field(default_factory=dict)  # symbolic dim -> value at export and in corpus.json
    exporter: str = "torchscript"  # a key of EXPORTERS


def image(size: int | tuple[int, int] = 224, name: str = "pixel_values") -> tuple[Input, ...]:
    h, w = (size, size) if isinstance(size, int) else size
    return (Input(name, "float32", ("batch", 3, h, w)),)


def text(vocab: int, mask: bool = True) -> tuple[Input, ...]:
    ids = Input("input_ids", "int64", ("batch", "sequence"), high=vocab)
    return (ids, Input("attention_mask", "int64", ("batch", "sequence"))) if mask else (ids,)


def timm_model(name: str, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        return import_timm().create_model(name, pretrained=False, **kwargs)

    return build


class Outputs:
    """Wraps a transformers model: named inputs in, the chosen output tensors out."""

    @staticmethod
    def wrap(model: Any, input_names: tuple[str, ...], pick: Callable[[Any], Any]) -> Any:
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *args: torch.Tensor) -> Any:
                return pick(self.model(**dict(zip(input_names, args, strict=True))))

        return Wrapped()


def hf(
    model_cls: str, config_cls: str, inputs: tuple[Input, ...], pick: Callable[[Any], Any], **config: Any
) -> Callable[[], Any]:
    def build() -> Any:
        import transformers

        cfg = getattr(transformers, config_cls)(attn_implementation="eager", **config)
        model = getattr(transformers, model_cls)(cfg)
        return Outputs.wrap(model, tuple(i.name for i in inputs), pick)

    return build


def hf_encoder(model_cls: str, config_cls: str, inputs: tuple[Input, ...], **config: Any) -> Callable[[], Any]:
    """The encoder of an encoder-decoder model (BART, Whisper), alone."""

    def build() -> Any:
        import transformers

        cfg = getattr(transformers, config_cls)(attn_implementation="eager", **config)
        encoder = getattr(transformers, model_cls)(cfg).get_encoder()
        return Outputs.wrap(encoder, tuple(i.name for i in inputs), lambda o: o.last_hidden_state)

    return build


def last_hidden(o: Any) -> Any:
    return o.last_hidden_state


CNN_INT8 = ("int8_qdq", "int8_qop")
TEXT = {"sequence": SEQUENCE}
BERT_TEXT = text(30522)

ARCHS: tuple[Arch, ...] = (
    # ResNets of five depths: their layers repeat across the family
    Arch("resnet18", "ResNet", "timm resnet18", timm_model("resnet18"), image(), ("logits",), CNN_INT8),
    Arch("resnet34", "ResNet", "timm resnet34", timm_model("resnet34"), image(), ("logits",)),
    Arch("resnet50", "ResNet", "timm resnet50", timm_model("resnet50"), image(), ("logits",), (*CNN_INT8, "fp16")),
    Arch("resnet101", "ResNet", "timm resnet101", timm_model("resnet101"), image(), ("logits",)),
    Arch("resnet152", "ResNet", "timm resnet152", timm_model("resnet152"), image(), ("logits",)),
    Arch(
        "efficientnet_b0",
        "EfficientNet",
        "timm efficientnet_b0",
        timm_model("efficientnet_b0"),
        image(),
        ("logits",),
        ("int8_qdq", "fp16"),
    ),
    Arch(
        "mobilenetv3_large_100",
        "MobileNetV3",
        "timm mobilenetv3_large_100",
        timm_model("mobilenetv3_large_100"),
        image(),
        ("logits",),
        CNN_INT8,
    ),
    Arch(
        "mobilenetv3_small_100",
        "MobileNetV3",
        "timm mobilenetv3_small_100",
        timm_model("mobilenetv3_small_100"),
        image(),
        ("logits",),
    ),
    Arch(
        "convnext_tiny", "ConvNeXt", "timm convnext_tiny", timm_model("convnext_tiny"), image(), ("logits",), ("fp16",)
    ),
    Arch("convnext_small", "ConvNeXt", "timm convnext_small", timm_model("convnext_small"), image(), ("logits",)),
    Arch(
        "regnety_004",
        "RegNet",
        "timm regnety_004 (RegNetY-400MF)",
        timm_model("regnety_004"),
        image(),
        ("logits",),
        ("int8_qop",),
    ),
    Arch(
        "vit_small_patch16_224",
        "ViT",
        "timm vit_small_patch16_224",
        timm_model("vit_small_patch16_224"),
        image(),
        ("logits",),
        ("int8_qdq", "fp16"),
    ),
    Arch(
        "deit_tiny_patch16_224",
        "DeiT",
        "timm deit_tiny_patch16_224",
        timm_model("deit_tiny_patch16_224"),
        image(),
        ("logits",),
    ),
    Arch(
        "swin_tiny_patch4_window7_224",
        "Swin",
        "timm swin_tiny_patch4_window7_224",
        timm_model("swin_tiny_patch4_window7_224"),
        image(),
        ("logits",),
    ),
    Arch(
        "swin_small_patch4_window7_224",
        "Swin",
        "timm swin_small_patch4_window7_224",
        timm_model("swin_small_patch4_window7_224"),
        image(),
        ("logits",),
    ),
    Arch("mobilevit_xs", "MobileViT", "timm mobilevit_xs", timm_model("mobilevit_xs"), image(256), ("logits",)),
    # text encoders and decoders: standard sizes (whisper-tiny, t5-small, a small Llama where said)
    Arch(
        "bert",
        "BERT",
        "transformers BertModel(BertConfig()) (bert-base: 12 layers, hidden 768)",
        hf("BertModel", "BertConfig", BERT_TEXT, last_hidden),
        BERT_TEXT,
        ("last_hidden_state",),
        ("int8_qdq", "int8_qop", "int8_dynamic", "fp16"),
        sizes=TEXT,
    ),
    Arch(
        "roberta",
        "RoBERTa",
        "transformers RobertaModel(RobertaConfig(vocab_size=50265)) (roberta-base: 12 layers, hidden 768)",
        hf("RobertaModel", "RobertaConfig", text(50265), last_hidden, vocab_size=50265),
        text(50265),
        ("last_hidden_state",),
        ("int8_dynamic",),
        sizes=TEXT,
    ),
    Arch(
        "distilbert",
        "DistilBERT",
        "transformers DistilBertModel(DistilBertConfig()) (distilbert-base, 6 layers)",
        hf("DistilBertModel", "DistilBertConfig", BERT_TEXT, last_hidden),
        BERT_TEXT,
        ("last_hidden_state",),
        ("int8_dynamic",),
        sizes=TEXT,
    ),
    Arch(
        "albert",
        "ALBERT",
        "transformers AlbertModel(AlbertConfig(albert-base sizes: embedding 128, hidden 768, 12 layers sharing "
        "one set of weights, 12 heads, intermediate 3072)), exported by the dynamo exporter",
        hf(
            "AlbertModel",
            "AlbertConfig",
            text(30000),
            last_hidden,
            embedding_size=128,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
        ),
        text(30000),
        ("last_hidden_state",),
        ("int8_dynamic",),
        sizes=TEXT,
        exporter="dynamo",
    ),
    Arch(
        "gpt2",
        "GPT-2",
        "transformers GPT2Model(GPT2Config(use_cache=False)) (gpt2: 12 layers, hidden 768)",
        hf("GPT2Model", "GPT2Config", text(50257), last_hidden, use_cache=False),
        text(50257),
        ("last_hidden_state",),
        ("int8_dynamic", "fp16"),
        sizes=TEXT,
    ),
    Arch(
        "t5_encoder",
        "T5",
        "transformers T5EncoderModel(T5Config()) (t5-small: d_model 512, 6 layers)",
        hf("T5EncoderModel", "T5Config", text(32128), last_hidden),
        text(32128),
        ("last_hidden_state",),
        ("int8_dynamic",),
        sizes=TEXT,
    ),
    Arch(
        "bart_encoder",
        "BART",
        "transformers BartModel(BartConfig(encoder_layers=6)).get_encoder() (bart-base width, 6 layers)",
        hf_encoder("BartModel", "BartConfig", text(50265), encoder_layers=6, decoder_layers=1),
        text(50265),
        ("last_hidden_state",),
        sizes=TEXT,
    ),
    Arch(
        "whisper_encoder",
        "Whisper",
        "transformers WhisperModel(WhisperConfig(whisper-tiny sizes)).get_encoder(): d_model 384, 4 layers, "
        "80 mel x 3000",
        hf_encoder(
            "WhisperModel",
            "WhisperConfig",
            (Input("input_features", "float32", ("batch", 80, 3000)),),
            d_model=384,
            encoder_layers=4,
            encoder_attention_heads=6,
            decoder_layers=1,
            decoder_attention_heads=6,
            encoder_ffn_dim=1536,
            decoder_ffn_dim=1536,
        ),
        (Input("input_features", "float32", ("batch", 80, 3000)),),
        ("last_hidden_state",),
        ("int8_dynamic", "fp16"),
    ),
    Arch(
        "llama",
        "Llama",
        "transformers LlamaModel(LlamaConfig(hidden_size=512, intermediate_size=1376, 4 layers, 8 heads, "
        "4 KV heads, vocab 32000, use_cache=False)) (a small Llama: RMSNorm, rotary, SwiGLU, GQA)",
        hf(
            "LlamaModel",
            "LlamaConfig",
            text(32000),
            last_hidden,
            hidden_size=512,
            intermediate_size=1376,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=4,
            vocab_size=32000,
            use_cache=False,
        ),
        text(32000),
        ("last_hidden_state",),
        ("int8_dynamic",),
        sizes=TEXT,
    ),
    # a detector and a segmentation model
    Arch(
        "detr_resnet50",
        "DETR",
        "transformers DetrForObjectDetection(DetrConfig(use_timm_backbone=False, backbone_config=ResNetConfig(), "
        "use_pretrained_backbone=False)) at 320x320",
        lambda: detr(),
        image(320),
        ("logits", "pred_boxes"),
    ),
    Arch(
        "yolos_tiny",
        "YOLOS",
        "transformers YolosForObjectDetection(YolosConfig(hidden_size=192, 12 layers, 3 heads, image_size=[320, 320])) "
        "(yolos-tiny sizes)",
        hf(
            "YolosForObjectDetection",
            "YolosConfig",
            image(320),
            lambda o: (o.logits, o.pred_boxes),
            hidden_size=192,
            num_hidden_layers=12,
            num_attention_heads=3,
            intermediate_size=768,
            image_size=[320, 320],
        ),
        image(320),
        ("logits", "pred_boxes"),
    ),
    Arch(
        "segformer_b0",
        "SegFormer",
        "transformers SegformerForSemanticSegmentation(SegformerConfig()) (mit-b0 sizes, 150 classes) at 256x256",
        hf("SegformerForSemanticSegmentation", "SegformerConfig", image(256), lambda o: o.logits, num_labels=150),
        image(256),
        ("logits",),
        ("fp16",),
    ),
)


def detr() -> Any:
    import transformers

    cfg = transformers.DetrConfig(
        use_timm_backbone=False,
        backbone_config=transformers.ResNetConfig(out_features=["stage4"]),
        use_pretrained_backbone=False,
        attn_implementation="eager",
    )
    model = transformers.DetrForObjectDetection(cfg)
    return Outputs.wrap(model, ("pixel_values",), lambda o: (o.logits, o.pred_boxes))


# ------------------------------------------------------------------ export, variants, stripping


def concrete(arch: Arch, batch: int, extra: int = 0) -> dict[str, tuple[int, ...]]:
    """Each input's shape with ``batch``, and symbolic sizes from ``arch.sizes`` (plus ``extra``)."""
    sizes = {"batch": batch, **{k: v + extra for k, v in arch.sizes.items()}}
    return {i.name: tuple(sizes[d] if isinstance(d, str) else d for d in i.dims) for i in arch.inputs}


def feeds(arch: Arch, batch: int, seed: int, extra: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for inp, shape in zip(arch.inputs, concrete(arch, batch, extra).values(), strict=True):
        if inp.dtype == "float32":
            out[inp.name] = rng.standard_normal(shape, dtype=np.float32)
        elif inp.high:
            out[inp.name] = rng.integers(0, inp.high, shape, dtype=np.int64)
        else:
            out[inp.name] = np.ones(shape, np.int64)
    return out


def export(arch: Arch) -> tuple[onnx.ModelProto, Any, int]:
    import torch

    torch.manual_seed(0)
    module = arch.build().eval()
    params = sum(p.numel() for p in module.parameters())
    example = feeds(arch, 1, seed=0)
    args = tuple(torch.from_numpy(v) for v in example.values())
    dynamic = {i.name: {k: d for k, d in enumerate(i.dims) if isinstance(d, str)} for i in arch.inputs}
    with torch.no_grad():
        if arch.exporter == "dynamo":
            model = export_dynamo(arch, module)
        else:
            buffer = io.BytesIO()
            torch.onnx.export(
                module,
                args,
                buffer,
                dynamo=False,
                opset_version=OPSET,
                input_names=[i.name for i in arch.inputs],
                output_names=list(arch.outputs),
                dynamic_axes={**dynamic, **{o: {0: "batch"} for o in arch.outputs}},
                do_constant_folding=True,
            )
            model = onnx.load_from_string(buffer.getvalue())
        expected = module(*args)
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    got = run(model, example)
    for name, e, g in zip(arch.outputs, expected, got, strict=True):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-3, atol=1e-3, err_msg=f"{arch.name} {name}: ORT != torch")
    return model, module, params


def export_dynamo(arch: Arch, module: Any) -> onnx.ModelProto:
    """The ``torch.export``-based export, symbolic dimensions as ``torch.export.Dim`` objects.

    Traced at batch 2 (and the sequence length less 32): ``torch.export`` specialises a
    dimension of size 1, and one equal to another that may differ at run time.
    """
    import torch
    from torch.export import Dim

    dims = {d: Dim(d, min=1, max=4096) for i in arch.inputs for d in i.dims if isinstance(d, str)}
    traced = feeds(arch, 2, seed=0, extra=-32 if arch.sizes else 0)
    program = torch.onnx.export(
        module,
        tuple(torch.from_numpy(v) for v in traced.values()),
        dynamo=True,
        input_names=[i.name for i in arch.inputs],
        output_names=list(arch.outputs),
        # every wrapper's forward takes ``*args``: one entry per input under its name
        dynamic_shapes={
            "args": tuple({k: dims[d] for k, d in enumerate(i.dims) if isinstance(d, str)} for i in arch.inputs)
        },
    )
    return program.model_proto


def run(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in inputs.items() if k in names})


class RandomReader(CalibrationDataReader):
    """Calibration data for ``quantize_static``: a few random batches of 1."""

    def __init__(self, arch: Arch, count: int = 4) -> None:
        self._batches = iter([feeds(arch, 1, seed=100 + i) for i in range(count)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def variant(arch: Arch, fp32: onnx.ModelProto, kind: str, tmp: Path) -> onnx.ModelProto:
    """An int8 or fp16 variant of the exported fp32 model."""
    src, dst = tmp / f"{arch.name}.onnx", tmp / f"{arch.name}_{kind}.onnx"
    onnx.save(fp32, str(src))
    if kind == "fp16":
        from onnxconverter_common import float16

        # value_info of the fp32 model would contradict the converted types; inference redoes it
        del fp32.graph.value_info[:]
        exported = {n.name for n in fp32.graph.node}
        half = float16.convert_float_to_float16(fp32, keep_io_types=True)
        del half.graph.value_info[:]
        # the converter leaves the export's own casts to float32 (GPT-2's position embeddings)
        # as they are, which then meet float16 tensors; they become casts to float16
        for node in half.graph.node:
            if node.op_type == "Cast" and node.name in exported:
                for attr in node.attribute:
                    if attr.name == "to" and attr.i == onnx.TensorProto.FLOAT:
                        attr.i = onnx.TensorProto.FLOAT16
        return half
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = tmp / f"{arch.name}_pre.onnx"
    try:
        quant_pre_process(str(src), str(pre), skip_optimization=False)
    except Exception:  # ORT's symbolic shape inference gives up on some exports: ONNX's own inference then
        quant_pre_process(str(src), str(pre), skip_optimization=False, skip_symbolic_shape=True)
    if kind == "int8_dynamic":
        quantize_dynamic(str(pre), str(dst), weight_type=QuantType.QInt8)
    else:
        reader = RandomReader(arch)
        quantize_static(
            str(pre),
            str(dst),
            reader,
            quant_format=QuantFormat.QDQ if kind == "int8_qdq" else QuantFormat.QOperator,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=False,
        )
    return onnx.load(str(dst))


def copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def lift_large_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """``Constant`` nodes of the main graph holding over THRESHOLD bytes become initializers.

    The exporter leaves some computed buffers as ``Constant`` nodes (Swin's shifted-window
    attention masks, 0.9 MiB); as initializers they are shipped without data like weights.
    """
    kept = []
    for node in model.graph.node:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type == "Constant" and set(attrs) == {"value"} and attrs["value"].t.ByteSize() > THRESHOLD:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(attrs["value"].t)
            tensor.name = node.output[0]
            model.graph.initializer.append(tensor)
        else:
            kept.append(node)
    if len(kept) < len(model.graph.node):
        del model.graph.node[:]
        model.graph.node.extend(kept)
    return model


def tensor_bytes(model: onnx.ModelProto) -> int:
    return sum(t.ByteSize() for t in model.graph.initializer)


def write_structure_only(model: onnx.ModelProto, path: Path) -> int:
    """Write ``path`` with every tensor over THRESHOLD bytes as data-less external data; its size."""
    data = path.with_name(path.name + ".data")
    model = copy(model)  # saving with external data moves the data out of the proto it is given
    del model.graph.value_info[:]  # inferred types of intermediates: benanza and ORT infer them again
    for node in model.graph.node:  # the dynamo exporter's stack traces and FX names: 3 KiB a node
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.save(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data.name,
        size_threshold=THRESHOLD,
        convert_attribute=False,
    )
    data.unlink(missing_ok=True)
    return path.stat().st_size


STATIC = "u8 activations, s8 weights, per tensor, MinMax calibration on random data"
MADE_BY = {
    "int8_qdq": f"onnxruntime.quantization.quantize_static (QDQ; {STATIC})",
    "int8_qop": f"onnxruntime.quantization.quantize_static (QOperator; {STATIC})",
    "int8_dynamic": "onnxruntime.quantization.quantize_dynamic (s8 weights)",
    "fp16": "onnxconverter_common.float16.convert_float_to_float16(keep_io_types=True)",
}


def shape_args(arch: Arch) -> list[str]:
    """``--shape`` arguments that bind what ``--batch 1`` leaves symbolic (a sequence length)."""
    shapes = concrete(arch, 1)
    return [
        f"{i.name}={'x'.join(map(str, shapes[i.name]))}"
        for i in arch.inputs
        if any(isinstance(d, str) and d != "batch" for d in i.dims)
    ]


def describe(arch: Arch, name: str, kind: str, model: onnx.ModelProto, params: int, size: int) -> dict[str, Any]:
    shapes = concrete(arch, 1)
    used = {"", "ai.onnx"} | {n.domain for n in model.graph.node}
    ops = sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}" for n in model.graph.node})
    return {
        "name": name,
        "file": f"models/{name}.onnx",
        "family": arch.family,
        "architecture": arch.name,
        "source": arch.source,
        "variant": kind,
        "made_by": EXPORTERS[arch.exporter] if kind == "fp32" else MADE_BY[kind],
        "opset": {(o.domain or "ai.onnx"): o.version for o in model.opset_import if o.domain in used},
        "inputs": [{"name": i.name, "dtype": i.dtype, "dims": list(i.dims)} for i in arch.inputs],
        "outputs": list(arch.outputs),
        "shapes_at_batch_1": {k: list(v) for k, v in shapes.items()},
        "shape_args": shape_args(arch),
        "parameters": params,
        "nodes": len(model.graph.node),
        "op_types": ops,
        "weight_bytes": tensor_bytes(model),
        "file_bytes": size,
    }


def make(arch: Arch, keep: Path | None, tmp: Path) -> list[dict[str, Any]]:
    started = time.perf_counter()
    fp32, _, params = export(arch)
    entries = []
    for kind in ("fp32", *arch.variants):
        name = arch.name if kind == "fp32" else f"{arch.name}_{kind}"
        model = fp32 if kind == "fp32" else variant(arch, copy(fp32), kind, tmp)
        model = lift_large_constants(copy(model))
        run(model, feeds(arch, 1, seed=1))  # ONNX Runtime runs it ...
        run(model, feeds(arch, 2, seed=2, extra=-32 if arch.sizes else 0))  # ... at another batch and length
        if keep is not None:
            onnx.save(copy(model), str(keep / f"{name}.onnx"), save_as_external_data=True, location=f"{name}.onnx.data")
        size = write_structure_only(model, MODELS / f"{name}.onnx")
        entries.append(describe(arch, name, kind, model, params, size))
        print(f"{name:40s} {len(model.graph.node):5d} nodes {size / 1024:8.1f} KiB", flush=True)
    print(f"  ({time.perf_counter() - started:.1f} s)", flush=True)
    return entries


# ------------------------------------------------------------------ README table


TABLE_START = "<!-- corpus table: written by make_corpus.py -->"
TABLE_END = "<!-- end of corpus table -->"


def readme_table(entries: list[dict[str, Any]]) -> str:
    rows = [
        "| model | family | variant | source | inputs | bind with | opsets | nodes | KiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in entries:
        dims = "; ".join(f"{i['name']} {'x'.join(map(str, i['dims']))} {i['dtype']}" for i in e["inputs"])
        binds = " ".join(["`--batch 1`", *(f"`--shape {a}`" for a in e["shape_args"])])
        opsets = ", ".join(f"{d} {v}" for d, v in sorted(e["opset"].items()))
        rows.append(
            f"| `{e['name']}` | {e['family']} | {e['variant']} | {e['source']} | {dims} | {binds} | {opsets} | "
            f"{e['nodes']} | {e['file_bytes'] / 1024:.0f} |"
        )
    return "\n".join([TABLE_START, *rows, TABLE_END])


def write_readme(entries: list[dict[str, Any]]) -> None:
    text = README.read_text()
    head, _, rest = text.partition(TABLE_START)
    _, _, tail = rest.partition(TABLE_END)
    README.write_text(head + readme_table(entries) + tail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="architectures to (re)make; the others keep their entries")
    parser.add_argument("--keep-weights", type=Path, help="also write the models with their weights here")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    MODELS.mkdir(parents=True, exist_ok=True)
    if args.keep_weights:
        args.keep_weights = args.keep_weights.resolve()
        args.keep_weights.mkdir(parents=True, exist_ok=True)
    old = {e["name"]: e for e in json.loads(MANIFEST.read_text())} if MANIFEST.exists() else {}
    chosen = [a for a in ARCHS if not args.only or a.name in args.only]
    unknown = set(args.only or ()) - {a.name for a in ARCHS}
    if unknown:
        raise SystemExit(f"unknown architectures: {', '.join(sorted(unknown))}")
    with tempfile.TemporaryDirectory(prefix="benanza-corpus-") as tmp, contextlib.chdir(tmp):
        # (the quantizer's shape inference writes temporary files to the working directory)
        for arch in chosen:  # the manifest is written after each architecture: a failure keeps the rest
            for stale in old.values():
                if stale["architecture"] == arch.name:
                    (ROOT / stale["file"]).unlink(missing_ok=True)
            old = {k: e for k, e in old.items() if e["architecture"] != arch.name}
            old.update((e["name"], e) for e in make(arch, args.keep_weights, Path(tmp)))
            write_manifest(list(old.values()))
    total = sum(p.stat().st_size for p in MODELS.glob("*.onnx"))
    print(f"{len(old)} models, {total / 2**20:.2f} MiB in {MODELS}")


def write_manifest(entries: list[dict[str, Any]]) -> None:
    order = {a.name: i for i, a in enumerate(ARCHS)}
    variants = ("fp32", "int8_qdq", "int8_qop", "int8_dynamic", "fp16")
    entries.sort(key=lambda e: (order.get(e["architecture"], len(order)), variants.index(e["variant"])))
    MANIFEST.write_text(json.dumps(entries, indent=1) + "\n")
    write_readme(entries)


if __name__ == "__main__":
    main()
