"""Rank 0's one-time work is waited for through the store, for as long as it takes."""

from __future__ import annotations

import threading
import time

import pytest
import torch.distributed as dist

from pivot.runtime.job import rank0_wait
from pivot.runtime.job.rank0_wait import Rank0Failed, run_on_rank0


def _waiter(store: dist.Store, rank: int, key: str, out: dict) -> threading.Thread:
    def wait() -> None:
        try:
            out[rank] = run_on_rank0(
                store, rank, key, "test work", lambda: "never", report_every_s=0.1
            )
        except Rank0Failed as e:
            out[rank] = e

    t = threading.Thread(target=wait)
    t.start()
    return t


def test_the_others_wait_past_any_collective_timeout_and_say_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rank0_wait, "POLL_S", 0.01)
    store = dist.HashStore()
    store.set_timeout(
        __import__("datetime").timedelta(seconds=0.2)
    )  # a blocking get would fail long before
    out: dict = {}
    threads = [_waiter(store, r, "phase", out) for r in (1, 2)]
    time.sleep(0.5)
    assert out == {}
    assert run_on_rank0(store, 0, "phase", "test work", lambda: "controller") == "controller"
    for t in threads:
        t.join(5)
    assert out == {1: None, 2: None}
    err = capsys.readouterr().err
    assert "waiting for rank 0 (test work)" in err and "no time limit" in err


def test_a_bad_input_on_rank0_stops_every_rank_with_rank0s_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = dist.HashStore()
    out: dict = {}
    threads = [_waiter(store, r, "bad", out) for r in (1, 2)]

    def work() -> None:
        raise ValueError("data.path='x.parquet': no such file")

    with pytest.raises(Rank0Failed):
        run_on_rank0(store, 0, "bad", "test work", work)
    for t in threads:
        t.join(5)
    assert (
        all(isinstance(e, Rank0Failed) and "no such file" in str(e) for e in out.values())
        and len(out) == 2
    )
    said = [line for line in capsys.readouterr().err.splitlines() if "waiting" not in line]
    assert said == ["pivot: cannot start: data.path='x.parquet': no such file"]


def test_a_bug_on_rank0_releases_the_others_and_keeps_its_traceback() -> None:
    store = dist.HashStore()
    out: dict = {}
    t = _waiter(store, 1, "bug", out)
    with pytest.raises(KeyError):
        run_on_rank0(store, 0, "bug", "test work", lambda: {}["missing"])
    t.join(5)
    assert isinstance(out[1], Rank0Failed) and "KeyError" in str(out[1])
