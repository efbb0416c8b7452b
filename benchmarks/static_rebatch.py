"""A static export run at another batch (``--batch N``): does the rebatched model compute what the export computes?

``torch.onnx.export(..., dynamo=True)`` without ``dynamic_shapes`` bakes the batch it was traced at into its graph
(``benanza.model.rebatch``). For each file and each ``--batch N``, this script

- processes the file at ``N`` as every benanza command does (``process_model``), counting its layers and the
  nodes left unbenchmarked with a reason (``unsupported``);
- runs benanza's end-to-end model (``process_model(..., keep_branches=True)``: what ``e2e_ms`` times) in ONNX
  Runtime on ``lcm(B, N)`` random samples, ``N`` at a time, and the file as exported on the same samples, ``B`` at
  a time, and compares every output sample by sample (``max_abs_diff``; ``matches`` within 1e-4 relative):
  a batch mixed into another sample's, or a constant broadcast wrongly, shows here, not only a failure (1e-3
  where the model computes in float16 or bfloat16, whose rounding differs at another batch). Floats are
  random per sample, token ids (an integer input benanza feeds zeros) random below ``--ids``, and a mask (one it
  feeds ones, ``[batch, length]``) pads each sample after a random length. A model that computes a statistic over
  its whole batch (``DynamicQuantizeLinear``: one scale for every sample, as ``quantize_dynamic`` writes it) gives
  each sample another output in another batch, legitimately: its samples are one sample repeated, whose batch's
  statistic is the sample's own at any batch (``samples``: "one, repeated"). Repeated samples cannot show a
  sample mixed into another; the same exports without ``quantize_dynamic`` are compared on random ones.

Printed and saved to ``benchmarks/results/static_rebatch.json`` (``--tag`` adds a suffix). The models are not in
the repository: small configurations of transformers 5.24 models with random weights (hidden size 64, 2 layers, 4
heads), exported by torch 2.14 at batch ``B`` as a user would,

    m = transformers.ViTModel(transformers.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, image_size=64, patch_size=16)).eval()
    torch.onnx.export(m, (torch.randn(B, 3, 64, 64),), f"vit_b{B}.onnx", dynamo=True)

(text models fed ``torch.randint(0, 100, (B, 16))`` token ids and, where they take one, a mask of ones; decoders
with ``config.use_cache = False``; ``dynamo=False, opset_version=17`` for the TorchScript exports). ``_before``
files are the code before ``benanza.model.rebatch`` (2026-11-30), ``_after`` with it, ``_unseen`` seven model
families exported after it was written. ``_quantized`` files hold those exports (BERT, ViT, Qwen2 at batch 1, and
a ResNet) as ONNX Runtime 1.32's tools rewrite them:

    MatMulNBitsQuantizer(onnx.load(p), block_size=32, is_symmetric=True)      # *_int4: MatMulNBits
    quantize_static(p, q, reader, quant_format=QuantFormat.QDQ)               # *_qdq: 4 random calibration samples
    quantize_static(p, q, reader, quant_format=QuantFormat.QOperator)         # *_qop: QLinearConcat, QLinearSoftmax
    convert_float_to_float16(onnx.load(p), keep_io_types=True)                # *_fp16: its nodes out of order
    convert_float_to_float16(onnx.load(p), keep_io_types=False)               # *_fp16io: float16 inputs
    optimize_model(p, model_type="bert", opt_level=1)                         # *_ortopt: SkipLayerNormalization

``_recurrent`` files hold a batch-first 2-layer bidirectional ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` (40 features
through a linear layer to 128, hidden size 256, a linear head) exported at batch 2 by ``dynamo=True`` (its zero
initial state a constant ``[2, B, 256]``; ``*_d.onnx``), and the LSTM and GRU by TorchScript without dynamic axes
(that constant ``Expand``ed to a shape read off the input; ``*_ts_static.onnx``). A model that ``quantize_dynamic``
quantized computes its activations' scale at run time over the whole batch, so each sample's output depends on the
batch it runs in (random samples of a ``DynamicQuantizeLSTM`` of the test's LSTM: 0.22 apart at outputs of about
1); such a model is fed one sample repeated (above). ``_dynamic`` files: ``quantize_dynamic(p, q)`` of the
``_quantized`` exports (``*_dyn``: ``DynamicQuantizeLinear``, ``MatMulInteger``, ``ConvInteger``).

    python benchmarks/static_rebatch.py vit_b1.onnx vit_b4.onnx bert_b1.onnx --batch 1 --batch 3 --batch 8
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from side_by_side import save_results

from benanza.errors import BenanzaError, one_line
from benanza.model.load import load_model, with_synthetic_weights
from benanza.model.process import process_model
from benanza.model.shapes import runtime_inputs
from benanza.runtimes.onnxruntime import feeds_for


def session(model) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(with_synthetic_weights(model).SerializeToString(), options, ["CPUExecutionProvider"])


def run_in_chunks(sess: ort.InferenceSession, samples: dict[str, np.ndarray], chunk: int) -> list[np.ndarray]:
    total = next(iter(samples.values())).shape[0]
    parts = [sess.run(None, {n: a[i : i + chunk] for n, a in samples.items()}) for i in range(0, total, chunk)]
    return [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]


# ``matches``: within this share of the largest output's magnitude; float16 and bfloat16 arithmetic rounds
# differently at another batch (other kernel blockings), so a model that computes in either gets the wider one
_TOLERANCE = 1e-4
_LOW_PRECISION_TOLERANCE = 1e-3
# ops whose output for a sample depends on the other samples of its batch
_BATCH_WIDE = frozenset({"DynamicQuantizeLinear", "DynamicQuantizeLSTM", "DynamicQuantizeMatMul"})
_LOW_PRECISION = frozenset({"float16", "bfloat16"})


def one(path: Path, batch: int, ids: int) -> dict[str, Any]:
    try:
        shipped = load_model(path)
    except BenanzaError as exc:
        return {"model": path.name, "exported_batch": None, "batch": batch, "error": one_line(exc)}
    exported_batch = {vi.name: vi.type.tensor_type.shape.dim[0].dim_value for vi in runtime_inputs(shipped)}
    old = max(exported_batch.values())
    row: dict[str, Any] = {"model": path.name, "exported_batch": old, "batch": batch}
    try:
        processed = process_model(path, batch, proto=shipped)
        row["layers"] = len(processed.graph.layers)
        row["unsupported"] = len(processed.graph.unsupported)
        row["unsupported_first"] = [
            f"{u.node} ({u.op_type}): {u.reason}"[:200] for u in processed.graph.unsupported[:3]
        ]
        low_precision = any(t.dtype in _LOW_PRECISION for layer in processed.graph.layers for t in layer.outputs)
        batch_wide = sorted({layer.op_type for layer in processed.graph.layers if layer.op_type in _BATCH_WIDE})
        bound = process_model(path, batch, proto=shipped, keep_branches=True).proto
    except BenanzaError as exc:
        row["error"] = one_line(exc)
        return row
    total = math.lcm(old, batch)
    rng = np.random.default_rng(0)
    feeds = feeds_for(with_synthetic_weights(bound))  # the types and the value ranges benanza feeds
    samples = {}
    for name, value in feeds.items():
        shape = (total, *value.shape[1:])
        if value.dtype.kind == "f":
            samples[name] = rng.standard_normal(shape).astype(value.dtype)
        elif np.unique(value).tolist() == [0]:  # an index (token ids): ids below --ids, distinct per sample
            samples[name] = rng.integers(0, ids, size=shape).astype(value.dtype)
        elif len(shape) == 2 and np.unique(value).tolist() == [1]:  # a mask: each sample padded after its length
            lengths = rng.integers(1, shape[1] + 1, size=total)
            samples[name] = (np.arange(shape[1])[None, :] < lengths[:, None]).astype(value.dtype)
        else:  # as benanza feeds it
            samples[name] = np.broadcast_to(value[:1], shape).copy()
    row["samples"] = (
        "random" if not batch_wide else f"one, repeated ({', '.join(batch_wide)}: a statistic of the batch)"
    )
    if batch_wide:
        samples = {name: np.broadcast_to(a[:1], a.shape).copy() for name, a in samples.items()}
    try:
        ours = run_in_chunks(session(bound), samples, batch)
    except Exception as exc:  # the rebatched model does not run: the finding
        row["error"] = f"the rebatched model fails in ONNX Runtime: {one_line(exc)}"
        return row
    theirs = run_in_chunks(session(shipped), samples, old)
    diffs = [
        float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.shape == b.shape else None
        for a, b in zip(ours, theirs, strict=True)
    ]
    row["max_abs_diff"] = max((d for d in diffs if d is not None), default=None)
    row["shapes_differ"] = [i for i, d in enumerate(diffs) if d is None]
    scale = max(float(np.max(np.abs(b))) for b in theirs)
    row["tolerance"] = _LOW_PRECISION_TOLERANCE if low_precision else _TOLERANCE
    row["matches"] = (
        not row["shapes_differ"]
        and row["max_abs_diff"] is not None
        and row["max_abs_diff"] <= row["tolerance"] * max(scale, 1.0)
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--batch", type=int, action="append", required=True)
    parser.add_argument("--ids", type=int, default=100, help="token ids are drawn below this (default: 100)")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    rows = [one(path, batch, args.ids) for path in args.models for batch in args.batch]
    for r in rows:
        diff = f"max |diff| {r['max_abs_diff']:.2e}" if r.get("max_abs_diff") is not None else "no output to compare"
        shapes = f", output(s) {r['shapes_differ']} of another shape" if r.get("shapes_differ") else ""
        verdict = r.get("error") or (
            f"{r['layers']} layers, {r['unsupported']} unbenchmarked, outputs {'match' if r['matches'] else 'DIFFER'} "
            f"({diff}{shapes})"
        )
        print(f"{r['model']:<20} exported at {r['exported_batch'] or '?'}, --batch {r['batch']}: {verdict}")
    print(save_results("static_rebatch", args.tag, {"rows": rows}))


if __name__ == "__main__":
    main()
