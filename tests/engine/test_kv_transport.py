"""KV slices over the transports (pivot/engine/kv_transport.py): the destination picks by where
the handle says the KV lives. Over NIXL (UCX on CPU, nixl-cu12) between two processes that play
two hosts, a migrated sequence continues with exactly the tokens an uninterrupted run produces
(the oracle: the same requests run to the end on one engine in the destination process), its
prefill is 0, and the source removes what it served once the destination is done. The CUDA IPC
path cannot run here: its selection is tested."""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import socket
from pathlib import Path

import msgspec
import pytest
import torch.distributed as dist

from pivot.engine import Engine, Request
from pivot.engine.kv_transport import KVPlace, choose, rank_path
from pivot.engine.sequence import KVHandle
from tests import forked_ranks
from tests.engine.conftest import make_model, prompts, run_all
from tests.engine.test_kv_migration import CONFIG, GREEDY, N

TIMEOUT = datetime.timedelta(seconds=120)
HANDLE = KVHandle("", 5, 1, "L2", 0, host=0)


def test_destination_picks_the_transport_by_where_the_kv_lives(tmp_path: Path) -> None:
    base = str(tmp_path / "kv")
    h = dataclasses.replace(HANDLE, path=base)
    assert choose(h, 0, KVPlace(host=0)) is None  # nothing written
    Path(rank_path(base, 0)).write_bytes(b"x")
    assert choose(h, 0, KVPlace(host=0)) == "shm"
    link = object()  # only its presence matters to the choice
    assert choose(h, 0, KVPlace(host=1)) is None  # another host, not served
    assert choose(h, 0, KVPlace(host=1, link=link)) is None  # type: ignore[arg-type]
    served = dataclasses.replace(h, nixl_key="job/kv")
    assert choose(served, 0, KVPlace(host=1, link=link)) == "nixl"  # type: ignore[arg-type]
    assert choose(served, 0, KVPlace(host=0, link=link)) == "shm"  # type: ignore[arg-type]
    cuda = dataclasses.replace(h, cuda_ipc=True)
    assert choose(cuda, 0, KVPlace(host=0, cuda=True)) == "shm"  # no device record
    Path(rank_path(base, 0) + ".cuda").write_bytes(b"x")
    assert choose(cuda, 0, KVPlace(host=0, cuda=True)) == "cuda"
    assert choose(cuda, 0, KVPlace(host=0, cuda=False)) == "shm"  # a CPU destination
    assert choose(cuda, 0, KVPlace(host=1, cuda=True)) is None  # IPC is same-host only


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_REQS = msgspec.msgpack.Decoder(list[Request])


def _source(port: int, model: str, root: str) -> None:
    from pivot.gps.nixl_link import NixlLink

    store = dist.TCPStore("127.0.0.1", port, 2, True, timeout=TIMEOUT)
    a = Engine.from_pretrained(model, CONFIG)
    a.enable_kv_migration(f"{root}/kv_a", KVPlace(host=0, link=NixlLink("src", store)), "t/kv")
    for i, p in enumerate(prompts(N, seed=5)):
        a.add(Request(i, p, GREEDY))
    got = {}
    for _ in range(5):  # every prompt prefilled, a few tokens decoded
        got.update({o.id: o.output_ids for o in a.step()})
    moved = list(a.abort(list(range(N))))
    store.set("early", msgspec.msgpack.encode(got))
    store.set("moved", msgspec.msgpack.encode(moved))
    store.wait(["imported"])
    assert a.kv is not None
    a.kv.offers.collect()  # the destination marked every key done: unmapped, files removed
    left = [r.id for r in moved if Path(rank_path(r.kv.path, 0)).exists()]
    store.set("left", msgspec.msgpack.encode(left))
    store.wait(["finished"])


def _destination(port: int, model: str, root: str) -> None:
    from pivot.gps.nixl_link import NixlLink

    store = dist.TCPStore("127.0.0.1", port, 2, False, timeout=TIMEOUT)
    ref = Engine.from_pretrained(model, CONFIG)
    for i, p in enumerate(prompts(N, seed=5)):
        ref.add(Request(i, p, GREEDY))
    want = {i: o.output_ids for i, o in run_all(ref).items()}
    store.wait(["moved"])
    moved = _REQS.decode(store.get("moved"))
    b = Engine.from_pretrained(model, CONFIG)
    b.enable_kv_migration(f"{root}/kv_b", KVPlace(host=1, link=NixlLink("dst", store)))
    b.add_all(moved)
    st = b.stats()
    store.set("imported", b"1")
    got = {int(k): v for k, v in msgspec.msgpack.decode(store.get("early")).items()}
    got.update({i: o.output_ids for i, o in run_all(b).items()})
    result = dict(
        kv_imported=st.kv_imported,
        moved=len(moved),
        fallbacks=st.kv_fallbacks,
        prefill=b.stats().prefill_tokens,
        same=all(got[i] == want[i] for i in range(N)),
        left=msgspec.msgpack.decode(store.get("left")),
    )
    Path(root, "result.json").write_bytes(msgspec.json.encode(result))
    store.set("finished", b"1")


@pytest.mark.slow  # two spawned processes
@pytest.mark.skipif(
    importlib.util.find_spec("nixl_cu12") is None, reason="nixl-cu12 is not installed"
)
def test_kv_over_nixl_between_two_processes_continues_exactly(tmp_path: Path) -> None:
    model = tmp_path / "qwen2"
    make_model(model)
    port, ctx = _free_port(), forked_ranks.context()
    args = (port, str(model), str(tmp_path))
    procs = [ctx.Process(target=f, args=args) for f in (_source, _destination)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0]
    r = msgspec.json.decode((tmp_path / "result.json").read_bytes())
    assert r["moved"] > 0 and r["kv_imported"] == r["moved"] and r["fallbacks"] == 0, r
    assert r["prefill"] == 0, r  # every moved token's K/V came over NIXL
    assert r["same"], r
    assert r["left"] == [], r  # the source removed what it served
