#!/usr/bin/env bash
# One command for a machine with CUDA (sized for one H200, under 8 minutes): every GPU path of
# Pivot, one result line each, `PASS|FAIL|SKIP <check>: <figure or why>`:
#   gpu-tests         the @pytest.mark.gpu tests
#   engine-*          embedded engine on a random Qwen2.5-0.5B-shaped model, bf16: SDPA,
#                     flash-attn, flash-attn + transformer-engine linears (tokens/s)
#   numerics-*        per family (Qwen2.5, Qwen3, GLM-4, Qwen3.5), the engine in bf16 at 4,096
#                     positions against transformers fp32, as a ratio to transformers' own bf16
#                     error (bound 1.5x), and the engine against the trainer's forward (|dlogp|)
#   decode-step       Qwen2.5-7B-shaped decode step with CUDA graphs and without, batch 1/64/256,
#                     against the HBM floor and transformers' generate (tools/bench_decode.py)
#   gps-read          GPS Read from pinned host memory to the GPU (GB/s)
#   sglang-greedy     an sglang replica loaded from GPS gives the embedded engine's greedy tokens
#   sglang-shift      abort + release, resume + GPS weight update (shift-up seconds), partials resumed
#   vllm-greedy       the same two for a vLLM replica (the paper presets' MoE judges): a release is
#   vllm-shift        vLLM's sleep(level=2), a resume its wake_up and the GPS Read reloaded
#   fsdp-bf16         FSDP2 bf16 train steps over an NCCL group, shift down / up bit-exact
#   train-pace-*      Qwen2.5-1.5B and 7B shapes (random weights, checkpointed layers, one GPU): a
#                     packed micro-batch of the 7B preset's lengths, real tokens/s, MFU against the
#                     GPU's bf16 peak, peak memory (the `train` check runs it after fsdp-bf16)
#   nccl-shift        the main job on min(GPUs, 2) ranks over NCCL: roles shift on the devices
#   main-job          a 3-step main job with --cluster.device cuda on min(GPUs, 4) ranks
# plus `PASS|FAIL|SKIP python|torch|cuda: ...` for the environment itself. A check whose library
# (sglang, vllm, flash-attn, transformer-engine, transformers) is not installed is a SKIP line, not a
# FAIL. Exit 1 on any FAIL. A broken environment is a FAIL: no python, a torch that does not
# import or is older than 2.11, a GPU that nvidia-smi sees but torch cannot use (driver too old
# for torch's CUDA build, a CPU-only torch). Only a machine with no NVIDIA GPU at all gets
# `SKIP cuda` and exit 0. It never installs anything: it uses the torch and libraries present.
#
#   tools/gpu_check.sh
#
# Env: PYTHON (default python), TORCHRUN (default torchrun), GPU_CHECK_TIMEOUT (seconds per
# check, default 300), NVIDIA_SMI (default nvidia-smi), GPU_CHECK_DEV (default /dev/nvidia0).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python}"
read -r -a TR <<<"${TORCHRUN:-torchrun}"
LIMIT="${GPU_CHECK_TIMEOUT:-300}"
SMI="${NVIDIA_SMI:-nvidia-smi}"
MIN_TORCH="2.11"
LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/pivot-gpu-check.XXXXXX")"
RESULTS="$LOG_DIR/results.txt"
: >"$RESULTS"
note() { echo "$1" | tee -a "$RESULTS"; }

if ! command -v "$PY" >/dev/null 2>&1; then
  echo "FAIL python: '$PY' not found (set PYTHON to the environment's interpreter)"
  exit 1
fi
# one line: "ok <torch> <cuda build|none> <available 0|1> <devices> <warning>" or "error <why>"
probe="$("$PY" - <<'PYEOF' 2>&1 | tail -n 1
import warnings
try:
    import torch
except BaseException as e:
    print("error", f"{type(e).__name__}: {e}".splitlines()[0][:300])
    raise SystemExit(0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        available, count = torch.cuda.is_available(), torch.cuda.device_count()
    except BaseException as e:
        available, count = False, 0
        caught.append(type("W", (), {"message": f"{type(e).__name__}: {e}"})())
why = " ".join(str(w.message).replace(chr(10), " ") for w in caught)[:300] or "-"
print("ok", torch.__version__, torch.version.cuda or "none", int(bool(available) and count > 0), count, why)
PYEOF
)"
read -r status torch_v cuda_v usable ndev warn <<<"$probe"
if [[ "$status" != ok ]]; then
  echo "FAIL torch: $PY cannot import torch: ${probe#error }"
  exit 1
fi
PRE_FAIL=0
if [[ "$(printf '%s\n%s\n' "$MIN_TORCH" "${torch_v%%+*}" | sort -V | head -n 1)" != "$MIN_TORCH" ]]; then
  note "FAIL torch: $torch_v is older than $MIN_TORCH (Pivot supports torch 2.11-2.14)"
  PRE_FAIL=1
else
  note "PASS torch: $torch_v (CUDA build $cuda_v; Pivot supports torch 2.11-2.14)"
fi
gpu_seen=""
if command -v "$SMI" >/dev/null 2>&1 && "$SMI" -L 2>/dev/null | grep -q '^GPU '; then
  gpu_seen="$("$SMI" -L 2>/dev/null | grep -c '^GPU ') GPU(s) listed by $SMI"
elif [[ -e "${GPU_CHECK_DEV:-/dev/nvidia0}" ]]; then
  gpu_seen="${GPU_CHECK_DEV:-/dev/nvidia0} exists"
fi
if [[ "$usable" != 1 ]]; then
  if [[ -z "$gpu_seen" ]]; then
    echo "SKIP cuda: no NVIDIA GPU on this machine (no $SMI listing, no ${GPU_CHECK_DEV:-/dev/nvidia0}) and torch $torch_v sees no CUDA device: nothing to check"
    exit "$PRE_FAIL"
  fi
  if [[ "$cuda_v" == none ]]; then
    echo "FAIL cuda: $gpu_seen, but torch $torch_v is a CPU-only build"
  else
    echo "FAIL cuda: $gpu_seen, but torch $torch_v (CUDA $cuda_v) cannot use it (driver too old for CUDA $cuda_v? CUDA_VISIBLE_DEVICES?): ${warn}"
  fi
  exit 1
fi
note "PASS cuda: $ndev device(s), torch $torch_v, CUDA $cuda_v"

NGPU="$("$PY" -c 'import torch; print(torch.cuda.device_count())')"
echo "== environment"
"$PY" -c 'import torch; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")'
command -v "$SMI" >/dev/null 2>&1 && "$SMI" -L

# run_check NAME CMD...: runs CMD under the time limit, keeps its PASS/FAIL lines; a command that
# fails without saying which check failed is one FAIL line for NAME
run_check() {
  local name="$1"; shift
  echo "== $name: $*"
  timeout "$LIMIT" "$@" >"$LOG_DIR/$name.log" 2>&1
  local rc=$?
  grep -E '^(PASS|FAIL|SKIP) ' "$LOG_DIR/$name.log" | tee -a "$RESULTS"
  if [[ $rc -ne 0 ]] && ! grep -q '^FAIL ' "$LOG_DIR/$name.log"; then
    local why="exit $rc"; [[ $rc -eq 124 ]] && why="timed out after ${LIMIT}s"
    echo "FAIL $name: $why; log $LOG_DIR/$name.log" | tee -a "$RESULTS"
  fi
}

# -o addopts= : pyproject.toml's addopts name pytest-xdist's flags, and a GPU image may lack
# xdist (pytest then exits 4 before any test runs); the GPU tests run in one process anyway
echo "== gpu-tests: $PY -m pytest -o addopts= -m gpu -q -rA"
if ! "$PY" -c 'import pytest' >/dev/null 2>&1; then
  note "SKIP gpu-tests: pytest is not installed (it is in requirements-dev.txt)"
else
timeout "$LIMIT" "$PY" -m pytest -o addopts= -m gpu -q -rA >"$LOG_DIR/pytest.log" 2>&1
pytest_rc=$?
count() { grep -c "^$1 " "$LOG_DIR/pytest.log" || true; }
figure="$(count PASSED) passed, $(count FAILED) failed, $(count ERROR) errors, $(count SKIPPED) skipped"
case "$pytest_rc" in
  0|5) echo "PASS gpu-tests: $figure" | tee -a "$RESULTS" ;;
  *) echo "FAIL gpu-tests: $figure (pytest exit $pytest_rc; log $LOG_DIR/pytest.log)" | tee -a "$RESULTS"
     grep -E '^(FAILED|ERROR) ' "$LOG_DIR/pytest.log" | sed 's/^/  /' ;;
esac
fi

run_check engine "$PY" tools/gpu_checks.py engine
run_check numerics "$PY" tools/gpu_checks.py numerics
run_check decode "$PY" tools/bench_decode.py --device cuda --json "$LOG_DIR/decode.json"
run_check sglang "$PY" tools/gpu_checks.py sglang
run_check vllm "$PY" tools/gpu_checks.py vllm
# fsdp-bf16, then train-pace-Qwen2.5-1.5B and -7B (`gpu_checks.py train-pace` runs those alone)
run_check train "$PY" tools/gpu_checks.py train

# main_job NAME NPROC STEPS MIN_ROLES: the real program over NCCL, then its run folder checked
main_job() {
  local name="$1" nproc="$2" steps="$3" roles="$4"
  run_check "$name-run" "${TR[@]}" --standalone --nproc-per-node "$nproc" pivot/main.py --cluster.device cuda \
    --train.steps "$steps" --log.dir "$LOG_DIR/$name" --log.no-progress --planner.interval-s 0.1
  run_check "$name" "$PY" tools/gpu_checks.py job "$LOG_DIR/$name" --steps "$steps" --name "$name" --min-roles "$roles"
}
main_job nccl-shift "$(( NGPU < 2 ? NGPU : 2 ))" 1 2
main_job main-job "$(( NGPU < 4 ? NGPU : 4 ))" 3 1

echo
echo "== gpu_check report ($NGPU GPU(s); logs in $LOG_DIR)"
cat "$RESULTS"
! grep -q '^FAIL ' "$RESULTS"
