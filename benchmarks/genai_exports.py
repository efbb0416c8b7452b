"""Which layers of onnxruntime-genai's decoders the GPU runtime has a call for, a prompt and a decode step.

onnxruntime-genai's model builder writes the decoders users run with ONNX Runtime: int4 ``MatMulNBits``,
``GroupQueryAttention`` with Q, K and V packed into one input and the rotary embedding inside (its
default for the CPU and CUDA), Qwen3's Q/K normalisation fused into the attention (for CUDA) or split
out. This script builds two small decoders of random weights (a Llama, 8 query heads over 2 key/value
heads, and a Qwen3, 2 layers each, hidden 256, head 32) with the builder for the CPU (int4, float32) and
CUDA (float16, int4), then plans each with ``benchmarks/gpu_coverage.py`` at a 16-token prompt over an
empty cache and at one decode step after 15 tokens. Planned, not measured: no GPU is needed.

    python benchmarks/genai_exports.py [--builder-python PATH] [--work DIR]

The builder needs ``onnxruntime-genai``, ``transformers`` and ``torch`` (``--builder-python``: an
interpreter that has them, this one by default); the coverage runs here. Writes
``benchmarks/results/gpu_coverage_genai_{prompt,decode}.json``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
EXPORTS = (("cpu", "int4"), ("cpu", "fp32"), ("cuda", "fp16"), ("cuda", "int4"))
STEPS = {
    "prompt": {"sequence_length": 16, "total_sequence_length": 16, "past_sequence_length": 0},
    "decode": {"sequence_length": 1, "total_sequence_length": 16, "past_sequence_length": 15},
}
HEAD = 32  # the caches' head size, which the builder leaves symbolic (kv_cache_dim)

# Runs in the builder's interpreter: a random-weight Hugging Face model and a word-level tokenizer (the
# builder saves one beside the model) in the folder given.
_MAKE_MODEL = """
import sys, transformers as t
from tokenizers import Tokenizer, models
family, folder = sys.argv[1], sys.argv[2]
shared = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=2, max_position_embeddings=256)
config = t.LlamaConfig(**shared) if family == "llama" else t.Qwen3Config(**shared, head_dim=32)
model = t.AutoModelForCausalLM.from_config(config)
model.config.architectures = [type(model).__name__]
model.save_pretrained(folder)
words = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(509)}}
fast = t.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(words, unk_token="<unk>")),
                                 unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>")
fast.save_pretrained(folder)
"""


def quietly(cmd: list[str]) -> None:
    """Run ``cmd``; its output (the quantizer logs each layer) shown only if it fails, then exit."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        sys.exit(f"{cmd[0]}: {exc.strerror} (--builder-python: an interpreter with onnxruntime-genai)")
    if done.returncode:
        sys.exit(f"{' '.join(cmd[:4])} ... failed ({done.returncode}):\n{done.stderr[-4000:]}")


def build(builder: str, work: Path) -> list[Path]:
    """Every export's ``model.onnx``, built into ``work``."""
    files = []
    for family in ("llama", "qwen3"):
        hf = work / f"hf_{family}"
        quietly([builder, "-c", _MAKE_MODEL, family, str(hf)])
        for ep, precision in EXPORTS:
            out = work / f"{family}_{ep}_{precision}"
            args = ["-i", hf, "-m", hf, "-o", out, "-p", precision, "-e", ep, "-c", work / "cache"]
            quietly([builder, "-m", "onnxruntime_genai.models.builder", *map(str, args)])
            print(f"built {out.name}", flush=True)
            files.append(out / "model.onnx")
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builder-python", default=sys.executable, help="an interpreter with onnxruntime-genai")
    parser.add_argument("--work", type=Path, help="where the exports go (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        files = build(args.builder_python, work)
        for step, sizes in STEPS.items():
            dims = [f"--dim={name}={size}" for name, size in {**sizes, "kv_cache_dim": HEAD}.items()]
            out = RESULTS / f"gpu_coverage_genai_{step}.json"
            print(f"{step}: {' '.join(dims)}", flush=True)
            script = str(ROOT / "benchmarks" / "gpu_coverage.py")
            subprocess.run([sys.executable, script, *map(str, files), *dims, "--out", str(out)], check=True)


if __name__ == "__main__":
    main()
