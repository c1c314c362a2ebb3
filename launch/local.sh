#!/usr/bin/env bash
# Run Pivot on one host: one torchrun, one rank per GPU (or 4 CPU ranks without GPUs).
#
#   launch/local.sh [--preset NAME] [flags...]        e.g. launch/local.sh --train.steps 4
#   NPROC=8 launch/local.sh --preset qwen2.5-1.5b+glm-z1-9b
#
# Env: NPROC (ranks; default = `nvidia-smi -L` count, else 4), TORCHRUN (launcher command),
# PIVOT_MAX_RESTARTS (torchrun --max-restarts; default 0), PIVOT_RESUME (--checkpoint.resume;
# default auto: torchrun's restarts continue this run's folder, running the command again starts
# a new run folder; yes continues the newest run folder with a complete checkpoint),
# PIVOT_DRY_RUN=1 (print the command, do not run it).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

gpu_count() {
  # `nvidia-smi -L` prints one line per visible GPU; absent or failing means no GPU.
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
  else
    echo 0
  fi
}

if [[ -z "${NPROC:-}" ]]; then
  NPROC="$(gpu_count)"
  [[ "$NPROC" -gt 0 ]] || NPROC=4
fi

# torchrun may be missing from PATH under a system pip install; the module is the same program.
if [[ -n "${TORCHRUN:-}" ]]; then
  read -r -a launcher <<<"$TORCHRUN"
elif command -v torchrun >/dev/null 2>&1; then
  launcher=(torchrun)
else
  launcher=("${PYTHON:-python}" -m torch.distributed.run)
fi

cmd=("${launcher[@]}" --standalone --nproc-per-node "$NPROC" --max-restarts "${PIVOT_MAX_RESTARTS:-0}"
     "$ROOT/pivot/main.py" --checkpoint.resume "${PIVOT_RESUME:-auto}" "$@")
printf '+'; printf ' %q' "${cmd[@]}"; printf '\n'
[[ "${PIVOT_DRY_RUN:-0}" == 1 ]] && exit 0
exec "${cmd[@]}"
