"""Every reason a destination refuses a migrated sequence's KV handle is counted apart
(`EngineStats.kv_refused_<reason>`, pivot/engine/sequence.py REFUSALS), the refused files are
removed, and the sequence still finishes with the tokens of an uninterrupted run (it
re-prefills). The oracle for each case is the handle's own alteration: which field the test
broke names the reason it must be counted under."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pivot.engine import Engine, EngineConfig, Request
from pivot.engine.sequence import REFUSALS, KVHandle
from tests.engine.conftest import prompts, run_all
from tests.engine.test_kv_migration import CONFIG, GREEDY, N, _engine, _model, _reference

BROKEN: dict[str, Callable[[KVHandle, Path], KVHandle]] = {
    "other_tp": lambda h, _: dataclasses.replace(h, tp_size=2),
    "other_layout": lambda h, _: dataclasses.replace(h, layout=h.layout.replace("L", "L9")),
    "unreachable": lambda h, root: dataclasses.replace(h, path=str(root / "elsewhere" / "kv")),
    "bad_length": lambda h, _: dataclasses.replace(h, num_tokens=0),
}


def _moved(path: Path, root: Path) -> tuple[list[Request], dict]:
    """Requests aborted mid-generation on a first engine (with their KV handles) and the
    tokens it produced before."""
    a = _engine(path, root / "kv_a")
    for i, p in enumerate(prompts(N, seed=5)):
        a.add(Request(i, p, GREEDY))
    got: dict = {}
    for _ in range(5):
        got.update({o.id: o for o in a.step()})
    moved = list(a.abort(list(range(N))))
    assert moved and all(r.kv is not None for r in moved)
    return moved, got


def _refused(engine: Engine) -> dict[str, int]:
    st = engine.stats()
    return {r: getattr(st, f"kv_refused_{r}") for r in REFUSALS}


@pytest.mark.parametrize("reason", sorted(BROKEN))
def test_each_refusal_is_counted_under_its_reason(tmp_path: Path, reason: str) -> None:
    path = _model(tmp_path, "qwen2")
    want = _reference(path, GREEDY)
    moved, got = _moved(path, tmp_path)
    originals = [r.kv for r in moved]
    broken = [dataclasses.replace(r, kv=BROKEN[reason](r.kv, tmp_path)) for r in moved]
    b = _engine(path, tmp_path / "kv_b")
    b.add_all(broken)
    assert _refused(b) == {r: len(moved) * (r == reason) for r in REFUSALS}
    assert b.stats().kv_fallbacks == len(moved) and b.stats().kv_imported == 0
    if reason != "unreachable":  # the destination removes the files it refused
        assert not any(os.path.exists(f"{h.path}_r0") for h in originals)
    got.update(run_all(b))
    for i in range(N):
        assert got[i].output_ids == want[i].output_ids, i


def test_stale_and_no_room(tmp_path: Path) -> None:
    path = _model(tmp_path, "qwen2")
    moved, _ = _moved(path, tmp_path)
    stale = _engine(path, tmp_path / "kv_b")
    stale.load_weights(stale.weight_buffers(), version=3)  # same weights, other version
    stale.add_all(moved[:2])
    assert _refused(stale) == {r: 2 * (r == "stale") for r in REFUSALS}
    # room for about two of the sequences: the first ones import, the rest are refused for room
    need = moved[0].kv.num_tokens + moved[1].kv.num_tokens
    small = EngineConfig(
        kv_capacity_tokens=need + 2 * CONFIG.block_size,
        block_size=CONFIG.block_size,
        max_running_seqs=8,
        max_prefill_tokens=256,
    )
    full = Engine.from_pretrained(path, small)
    full.enable_kv_migration(str(tmp_path / "kv_c"))
    full.add_all(moved[2:])
    refused = _refused(full)
    assert refused["no_room"] >= 1 and sum(refused.values()) == refused["no_room"]
    assert full.stats().kv_imported >= 1
    assert full.stats().kv_imported + refused["no_room"] == len(moved) - 2
