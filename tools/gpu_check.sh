#!/usr/bin/env bash
# One-call GPU check for any machine with CUDA: runs every `@pytest.mark.gpu` test, then a
# short smoke of the main job through launch/local.sh, and prints what passed, failed or was
# skipped. Exit 1 on any failure; exit 0 (saying so) where CUDA is absent.
#
#   tools/gpu_check.sh
#
# Env: PYTHON (default python), GPU_CHECK_SMOKE_NPROC (smoke ranks; default min(GPUs, 4),
# skipped below 4 since tiny-cpu lays out 4 role slots), GPU_CHECK_SMOKE_ARGS (default
# "--preset tiny-cpu --train.steps 2"), GPU_CHECK_SMOKE_TIMEOUT (seconds, default 600).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python}"
LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/pivot-gpu-check.XXXXXX")"

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no CUDA device visible to torch ($("$PY" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo "torch not importable")); nothing to check."
  exit 0
fi

NGPU="$("$PY" -c 'import torch; print(torch.cuda.device_count())')"
echo "== environment"
"$PY" -c 'import torch; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")'
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L

echo "== GPU-marked tests: $PY -m pytest -m gpu -q -rA"
"$PY" -m pytest -m gpu -q -rA 2>&1 | tee "$LOG_DIR/pytest.log"
pytest_rc="${PIPESTATUS[0]}"

smoke="skipped"
smoke_nproc="${GPU_CHECK_SMOKE_NPROC:-$(( NGPU < 4 ? NGPU : 4 ))}"
read -r -a smoke_args <<<"${GPU_CHECK_SMOKE_ARGS:---preset tiny-cpu --train.steps 2}"
if [[ "$smoke_nproc" -lt 4 && -z "${GPU_CHECK_SMOKE_NPROC:-}" ]]; then
  smoke="skipped (needs 4 GPUs for the tiny-cpu layout, found $NGPU; set GPU_CHECK_SMOKE_NPROC and GPU_CHECK_SMOKE_ARGS to force)"
else
  echo "== smoke: NPROC=$smoke_nproc launch/local.sh ${smoke_args[*]}"
  NPROC="$smoke_nproc" timeout "${GPU_CHECK_SMOKE_TIMEOUT:-600}" launch/local.sh "${smoke_args[@]}" 2>&1 | tee "$LOG_DIR/smoke.log"
  smoke_rc="${PIPESTATUS[0]}"
  case "$smoke_rc" in
    0) smoke="passed" ;;
    124) smoke="FAILED (timed out after ${GPU_CHECK_SMOKE_TIMEOUT:-600}s; log $LOG_DIR/smoke.log)" ;;
    *) smoke="FAILED (exit $smoke_rc; log $LOG_DIR/smoke.log)" ;;
  esac
fi

count() { grep -c "^$1 " "$LOG_DIR/pytest.log" || true; }
echo
echo "== gpu_check report ($NGPU GPU(s))"
case "$pytest_rc" in
  0) tests="ok" ;;
  5) tests="ok (no GPU-marked tests collected)" ;;
  *) tests="FAILED (pytest exit $pytest_rc; log $LOG_DIR/pytest.log)" ;;
esac
echo "gpu tests: $tests: $(count PASSED) passed, $(count FAILED) failed, $(count ERROR) errors, $(count SKIPPED) skipped"
grep -E '^(FAILED|ERROR) ' "$LOG_DIR/pytest.log" | sed 's/^/  /' || true
grep -E '^SKIPPED ' "$LOG_DIR/pytest.log" | sed 's/^/  /' || true
echo "smoke: $smoke"

[[ "$pytest_rc" == 0 || "$pytest_rc" == 5 ]] && [[ "$smoke" != FAILED* ]]
