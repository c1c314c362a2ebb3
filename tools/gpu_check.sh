#!/usr/bin/env bash
# One command for a machine with CUDA (sized for one H200, under 8 minutes): every GPU path of
# Pivot, one result line each, `PASS <check>: <figure>` or `FAIL <check>: <why>`:
#   gpu-tests         the @pytest.mark.gpu tests
#   engine-*          embedded engine on a random Qwen2.5-0.5B-shaped model, bf16: SDPA,
#                     flash-attn, flash-attn + transformer-engine linears (tokens/s)
#   gps-read          GPS Read from pinned host memory to the GPU (GB/s)
#   sglang-greedy     an sglang replica loaded from GPS gives the embedded engine's greedy tokens
#   sglang-shift      abort + release, resume + GPS weight update (shift-up seconds), partials resumed
#   fsdp-bf16         FSDP2 bf16 train steps over an NCCL group, shift down / up bit-exact
#   nccl-shift        the main job on min(GPUs, 2) ranks over NCCL: roles shift on the devices
#   main-job          a 3-step main job with --cluster.device cuda on min(GPUs, 4) ranks
# Exit 1 on any FAIL; without CUDA it says so and exits 0.
#
#   tools/gpu_check.sh
#
# Env: PYTHON (default python), TORCHRUN (default torchrun), GPU_CHECK_TIMEOUT (seconds per
# check, default 300).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python}"
read -r -a TR <<<"${TORCHRUN:-torchrun}"
LIMIT="${GPU_CHECK_TIMEOUT:-300}"

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no CUDA device visible to torch ($("$PY" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo "torch not importable")); nothing to check."
  exit 0
fi

LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/pivot-gpu-check.XXXXXX")"
NGPU="$("$PY" -c 'import torch; print(torch.cuda.device_count())')"
echo "== environment"
"$PY" -c 'import torch; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")'
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L
RESULTS="$LOG_DIR/results.txt"
: >"$RESULTS"

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

echo "== gpu-tests: $PY -m pytest -m gpu -q -rA"
timeout "$LIMIT" "$PY" -m pytest -m gpu -q -rA >"$LOG_DIR/pytest.log" 2>&1
pytest_rc=$?
count() { grep -c "^$1 " "$LOG_DIR/pytest.log" || true; }
figure="$(count PASSED) passed, $(count FAILED) failed, $(count ERROR) errors, $(count SKIPPED) skipped"
case "$pytest_rc" in
  0|5) echo "PASS gpu-tests: $figure" | tee -a "$RESULTS" ;;
  *) echo "FAIL gpu-tests: $figure (pytest exit $pytest_rc; log $LOG_DIR/pytest.log)" | tee -a "$RESULTS"
     grep -E '^(FAILED|ERROR) ' "$LOG_DIR/pytest.log" | sed 's/^/  /' ;;
esac

run_check engine "$PY" tools/gpu_checks.py engine
run_check sglang "$PY" tools/gpu_checks.py sglang
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
