"""KV-preserving migration in the main job (4 CPU ranks, torchrun) under the chaos planner: a
random valid shift plan every tick, each shifting down a replica that holds a sequence known to
be mid-generation (pivot/plan/chaos.py), so sequences are aborted and migrated with their KV
(TP=1, and TP=2 where each rank moves its own head slice). A destination refuses KV only for
the two reasons the design expects (computed with an older policy; no room in a small engine),
and the exactly-once audit still finds every sample generated, judged and trained once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pivot.engine.sequence import REFUSALS
from tests.runtime.test_runtime import check_exactly_once, models, rows, torchrun  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

EXPECTED_REFUSALS = {"stale", "no_room"}

# replicas of 32 sequences and 8K KV tokens (the tiny preset's are 4x larger): fuller engines, so
# the chaos planner's aborts catch sequences mid-generation on every run
SMALL_ENGINES = [
    arg
    for role in ("rollout", "reward")
    for arg in (
        f"--{role}.engine.max-running-seqs",
        "32",
        f"--{role}.engine.kv-capacity-tokens",
        "8192",
    )
]
# No plan is made while a shift is in flight, and the trainer's first shift up takes about a
# second on CPU (importing FSDP, sharding). On a quiet machine a 3-step run's rollouts (two steps
# ahead under the staleness bound) all finished inside it: CI runs aborted nothing. Steps 3 and 4
# generate while the trainer is up and the chaos planner plans every tick.
STEPS = 5
CHAOS = [
    "--train.steps",
    str(STEPS),
    *SMALL_ENGINES,
    # a rollout lives 40 engine steps, several of the worker's 0.1 s stats reports: the monitor
    # sees it mid-generation, which is what the chaos planner targets
    "--rollout.max-new-tokens",
    "40",
    # judgings as long: a judge's weights never change, so its KV is never refused as stale. A
    # rollout's can be on every migration of a run (CI: 8 of 8 refused, a replica updated in
    # between), which left a run with 8-token judgings no import to check
    "--reward.max-new-tokens",
    "40",
    "--planner.strategy",
    "chaos",
    "--planner.interval-s",
    "0.05",
]


@pytest.mark.parametrize("tp", [1, 2])
def test_chaos_with_kv_migration_exactly_once(
    models: tuple[Path, Path],  # noqa: F811  (the fixture)
    tmp_path: Path,
    tp: int,
) -> None:
    t0 = time.time()
    torchrun(
        models,
        tmp_path,
        *CHAOS,
        "--planner.kv-migration",
        "--rollout.tp",
        str(tp),
        "--reward.tp",
        str(tp),
    )
    check_exactly_once(tmp_path, STEPS)
    last = rows(tmp_path, "metrics.jsonl")[-1]
    # a string: pytest shortens a dict's repr, and a failure here needs every counter
    counts = str({k: v for k, v in last.items() if k.startswith("count/")})
    assert last["count/migrated"] > 0 and last["count/kv_imported"] > 0, counts
    assert last["count/kv_imported_tokens"] > 0, counts
    # every refusal has an expected reason: K/V of an older policy (a rollout replica updated in
    # between: recomputing is exact) or a destination without room (small engines under chaos);
    # never a TP or layout mismatch, a handle the destination could not reach, a released cache
    refused = {r: last[f"count/kv_refused_{r}"] for r in REFUSALS}
    assert sum(refused.values()) == last["count/kv_fallbacks"], counts
    assert {r for r, n in refused.items() if n} <= EXPECTED_REFUSALS, counts
    # the files of KV nobody resumed (the job ended first) are swept at the end
    assert not [p for p in Path("/dev/shm").glob("pivot-*_kv_*") if p.stat().st_mtime >= t0]
