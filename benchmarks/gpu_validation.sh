#!/usr/bin/env bash
# The GPU runtime's validation on a machine with an NVIDIA GPU: every step in order, each under its
# own time limit so that one hang cannot eat the run, logs and JSON into OUTDIR.
#
#   benchmarks/gpu_validation.sh OUTDIR [STEP...]
#
# Steps (default: all, in this order):
#   env          the GPU, driver and library versions (nvidia-smi, pip show)
#   host         tests/test_cuda_host_library.py: bindings against the real cuDNN and its headers
#   gpu_tests    pytest -m gpu
#   smoke        benanza bench run of one zoo model with the cudnn runtime, then analyze lower-bound
#   gemm         benchmarks/gpu_fidelity.py --only gemm (8192^3 fp16/bf16: best cublasLt vs torch.matmul)
#   ncu          benchmarks/gpu_fidelity.py --only ncu (benanza's cold timing vs Nsight Compute)
#   resnet50     benanza bench run of ResNet-50 (batch $RESNET_BATCH, default 1) with --e2e, tensor cores on
#   resnet50_no_tc  the same with --no-tensor-cores (for the tensor-core analysis)
#   resnet50_bN, resnet50_bN_no_tc  the same two at batch N (e.g. resnet50_b32), in the same database
#   analyze      benanza analyze lower-bound and analyze optimizations --by-op over what was measured
#   corpus       benanza bench run --e2e of today's models from corpus/ (CORPUS_MODELS, default below: a
#                BERT, a Llama, an int8 QDQ ViT, an fp16 ConvNeXt, a SegFormer) at batch 1, each with the
#                corpus's input shapes, then analyze lower-bound: LayerNormalization, Where, reductions,
#                Q/DQ on a GPU, and what it skips with the reason (python benchmarks/gpu_coverage.py
#                says what to expect, without a GPU)
#   zoo          benchmarks/gpu_fidelity.py --only zoo (the zoo at batch 1 and 32, tensor cores on/off,
#                float16; bounds vs the framework end to end; ResNet-50's optimisation analyses).
#                About 0.5 s per layer on an H100 (2026-11-27, --min-time 0.01), about 8 minutes for
#                one variant at one batch: run a few parts per session with ZOO_ARGS
#                ("--variants float32-tc --batch 1 --min-time 0.002 --max-time 0.05"); each part is
#                merged into OUTDIR/gpu_fidelity.json beside those of earlier runs copied there
#
# MIN_TIME sets the smoke, ResNet-50 and corpus runs' --min-time (default 0.05 s per candidate; corpus 0.002).
# ZOO_ARGS passes options to the zoo check (e.g. "--variants float16-tc --batch 32 --min-time 0.002").
# A step's limit is STEP_LIMIT_<STEP> seconds (e.g. STEP_LIMIT_ZOO=300); with DEADLINE_S=N the whole
# run ends within N seconds (later steps get what is left, or are listed as not run). Wheels of what the machine
# lacks (below) are installed first when a .whl folder is present:
# the GPU machines here have CUDA, CuPy, cuDNN, PyTorch and ONNX Runtime but neither Ray nor
# pydantic, and nothing can be downloaded there. Ray is not needed: the single-machine path
# (bench run, analyze, the GPU tests) imports it nowhere.
#
# Prepare the wheels on a machine with internet (Python 3.12, x86-64):
#   python -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl pydantic pydantic-core annotated-types typing-inspection typing_extensions \
#     pydantic-settings python-dotenv orjson setproctitle ruptures nvidia-cudnn-frontend nvmath-python onnx2torch \
#     "cupti-python<13.1"   # CUPTI's bindings for the machine's CUPTI 13.0 (the ncu check's CUPTI column)
#
# Exit status: the number of failed steps (0: all passed). OUTDIR/steps.tsv lists each step, its exit
# status and seconds; OUTDIR/logs.tar.gz holds every log and the SQLite database.
set -u
T0=$(date +%s)
OUTDIR=${1:?usage: benchmarks/gpu_validation.sh OUTDIR [STEP...]}
shift
STEPS=${*:-env host gpu_tests smoke gemm ncu resnet50 resnet50_no_tc analyze corpus zoo}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# GPU_WORK names the run's folder (its SQLite database and logs): two calls on one machine that
# name the same folder add to one database, so the second can analyse what both measured
WORK=${GPU_WORK:-$(mktemp -d /tmp/gpu_validation.XXXX)}
LOGS=$WORK/logs
mkdir -p "$LOGS"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export BENANZA_SYSTEM=${BENANZA_SYSTEM:-gpu-validation}
DB="sqlite:///$WORK/gpu.db"

export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    if $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" .whl/*.whl \
        >"$LOGS/install.log" 2>&1; then
        export PYTHONPATH=$WORK/site:$PYTHONPATH
    else  # wheels for another Python or platform: run with what is installed, and say so
        echo "install of .whl failed (the steps run without it):"
        tail -3 "$LOGS/install.log"
    fi
fi
BENANZA="$PY -m benanza"

printf 'step\trc\tseconds\n' >"$OUTDIR/steps.tsv"
FAILED=0

step() {  # step NAME DEFAULT_LIMIT COMMAND...
    local name=$1 limit=$2 var rc start
    shift 2
    var="STEP_LIMIT_$(echo "$name" | tr '[:lower:]' '[:upper:]')"
    limit=${!var:-$limit}
    start=$(date +%s)
    if [ -n "${DEADLINE_S:-}" ]; then  # the whole run ends by then, with time left to pack the logs
        local left=$((T0 + DEADLINE_S - start - 15))
        [ "$left" -lt "$limit" ] && limit=$left
        if [ "$limit" -lt 5 ]; then
            printf '%s\t%s\t%s\n' "$name" "not-run" 0 | tee -a "$OUTDIR/steps.tsv"
            return
        fi
    fi
    echo "== $name (limit ${limit}s)"
    echo "\$ $*" >"$LOGS/$name.log"  # the log says what ran
    timeout -k 10 "$limit" "$@" >>"$LOGS/$name.log" 2>&1
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - start))" | tee -a "$OUTDIR/steps.tsv"
    if [ "$rc" -ne 0 ]; then
        FAILED=$((FAILED + 1))
        [ "$rc" -eq 124 ] && echo "   timed out after ${limit}s"
        tail -n "${TAIL_LINES:-25}" "$LOGS/$name.log" | cut -c1-300
    fi
}

env_report() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    $PY -c "import sys; print(sys.version)"
    $PY -m pip list 2>/dev/null | grep -iE "cupy|cudnn|cublas|cuda-|nvmath|torch|onnx|numpy|pydantic"
    command -v ncu && ncu --version | tail -1
    $BENANZA --help >/dev/null && echo "benanza imports"
    $PY - <<'EOF'
from benanza.runtimes.cuda.stack import gpu_stack, gpu_system
import json
print(json.dumps({"system": gpu_system(0), "stack": gpu_stack(0)}, indent=1, default=str))
EOF
}

corpus_run() {  # each model of CORPUS_MODELS through the cudnn runtime at batch 1; the count of failures
    local failed=0 name args
    for name in $CORPUS_MODELS; do
        # its file and the --shape flags that bind its inputs as the corpus does
        args=$($PY -c 'import json, sys
entry = next((e for e in json.load(open("corpus/corpus.json")) if e["name"] == sys.argv[1]), None)
if entry is None:
    sys.exit(f"no corpus model {sys.argv[1]!r} (corpus/corpus.json)")
print("corpus/" + entry["file"], *("--shape " + a for a in entry["shape_args"]))' "$name") || {
            failed=$((failed + 1))
            continue
        }
        echo "\$ benanza bench run $args --runtime cudnn --batch 1 --e2e"
        # shellcheck disable=SC2086  # $args: the file and its flags, split into words
        $BENANZA bench run $args --runtime cudnn --batch 1 --db "$DB" --e2e --min-time "${MIN_TIME:-0.002}" \
            --max-time 0.05 || failed=$((failed + 1))
    done
    $BENANZA analyze lower-bound --runtime cudnn --db "$DB" || failed=$((failed + 1))
    return "$failed"
}

export -f env_report corpus_run
export PY BENANZA DB MIN_TIME
export CORPUS_MODELS=${CORPUS_MODELS:-bert llama vit_small_patch16_224_int8_qdq convnext_tiny_fp16 segformer_b0}
PYTEST="$PY -m pytest -q -p no:cacheprovider --tb=short"
for s in $STEPS; do
    case $s in
    env) step env 60 bash -c env_report ;;
    host) step host 120 $PYTEST tests/test_cuda_host_library.py ;;
    gpu_tests) step gpu_tests 240 $PYTEST tests/test_cuda_*.py -m gpu --timeout 120 -rs ;;
    smoke)
        step smoke 240 $BENANZA bench run "$($PY -c 'from benanza.model.zoo import zoo_paths; print(next(p for p in zoo_paths() if "squeezenet" in p.name))')" \
            --runtime cudnn --batch 1 --db "$DB" --e2e --min-time "${MIN_TIME:-0.05}" --max-time 0.5
        step smoke_analyze 60 $BENANZA analyze lower-bound --runtime cudnn --db "$DB"
        ;;
    resnet50 | resnet50_no_tc | resnet50_b[0-9]* )
        tc=--tensor-cores
        [[ $s == *_no_tc ]] && tc=--no-tensor-cores
        batch=${RESNET_BATCH:-1}
        [[ $s =~ _b([0-9]+) ]] && batch=${BASH_REMATCH[1]}
        step "$s" 600 $BENANZA bench run "$($PY -c 'from benanza.model.zoo import zoo_paths; print(next(p for p in zoo_paths() if "resnet50" in p.name))')" \
            --runtime cudnn $tc --batch "$batch" --db "$DB" --e2e --min-time "${MIN_TIME:-0.05}" --max-time 0.5
        ;;
    analyze)
        step analyze 120 bash -c "$BENANZA analyze lower-bound --runtime cudnn --db '$DB' && $BENANZA analyze optimizations --db '$DB' --by-op"
        ;;
    corpus) step corpus 300 bash -c corpus_run ;;
    gemm) step gemm 180 $PY benchmarks/gpu_fidelity.py --only gemm --db "$DB" --out "$OUTDIR" ;;
    ncu) step ncu 240 $PY benchmarks/gpu_fidelity.py --only ncu --db "$DB" --out "$OUTDIR" ;;
    zoo) step zoo 1200 $PY benchmarks/gpu_fidelity.py --only zoo --db "$DB" --out "$OUTDIR" ${ZOO_ARGS:-} ;;
    *) echo "unknown step $s" && FAILED=$((FAILED + 1)) ;;
    esac
done

# the database as its writers left it: a step killed at its limit leaves its last commits in the
# write-ahead log (gpu.db-wal), which a copy of gpu.db alone would lose; SQLite's backup reads both
[ -f "$WORK/gpu.db" ] && $PY - "$WORK/gpu.db" "$LOGS/gpu.db" <<'EOF'
import sqlite3, sys
source, copy = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
source.backup(copy)
copy.close()
source.close()
EOF
tar -czf "$OUTDIR/logs.tar.gz" -C "$WORK" logs
echo "failed steps: $FAILED (logs: $OUTDIR/logs.tar.gz)"
exit "$FAILED"
