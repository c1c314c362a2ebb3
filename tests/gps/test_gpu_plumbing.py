"""GPS's GPU-only plumbing on CPU: page-locking of the shm buffers (a fake cudart counts the
registrations) and the choice of the installed NIXL wheel (fake modules)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

import pivot.gps.nixl_link as nixl_link
from pivot.gps.layout import parallel_layout, replicated_layout
from pivot.gps.spec import qwen2_specs
from pivot.gps.store import GPSStore, HostInfo

SPECS = qwen2_specs(2, 16, 32, 4, 2, 4, 64, dtype="float32")


class FakeCudart:
    def __init__(self) -> None:
        self.registered: list[tuple[int, int]] = []
        self.unregistered: list[int] = []

    def cudaHostRegister(self, ptr: int, size: int, flags: int) -> int:
        assert (ptr, size) not in self.registered, "the same mapping registered twice"
        self.registered.append((ptr, size))
        return 0

    def cudaHostUnregister(self, ptr: int) -> int:
        self.unregistered.append(ptr)
        return 0


def test_gps_buffer_is_page_locked_once_and_unlocked_at_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cudart = FakeCudart()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "cudart", lambda: cudart)
    store = GPSStore(
        dist.HashStore(), HostInfo(0, 0, 0, (0,)), namespace="gpsp" + uuid.uuid4().hex[:8]
    )
    gps = replicated_layout("m", SPECS, [0])
    store.register(gps)
    store.register(gps)  # again, as a second WeightSync on the same store would
    full = parallel_layout("m", SPECS, [0], [0])
    state = {s.name: torch.full(s.shape, 1.5) for s in SPECS}
    store.write("m", full, state)
    for _ in range(3):
        got, _ = store.read("m", full)
    assert torch.equal(got["model.norm.weight"], state["model.norm.weight"])
    buf = store.buffers["m"]
    assert cudart.registered == [(buf.raw.data_ptr(), buf.size)]
    with pytest.raises(ValueError, match="another layout"):
        store.register(
            replicated_layout("m", qwen2_specs(1, 16, 32, 4, 2, 4, 64, dtype="float32"), [0])
        )
    store.close()
    assert cudart.unregistered == [buf.raw.data_ptr()]


@pytest.mark.parametrize(
    ("installed", "chosen"),
    [
        ({"nixl_cu13"}, "nixl_cu13"),
        ({"nixl_cu12"}, "nixl_cu12"),
        ({"nixl", "nixl_cu12"}, "nixl"),
    ],
)
def test_nixl_api_is_taken_from_the_installed_wheel(
    monkeypatch: pytest.MonkeyPatch, installed: set[str], chosen: str
) -> None:
    def fake_import(name: str) -> SimpleNamespace:
        top = name.split(".")[0]
        if top not in installed:
            raise ModuleNotFoundError(f"No module named {top!r}", name=top)
        return SimpleNamespace(wheel=top)

    monkeypatch.setattr(nixl_link.importlib, "import_module", fake_import)
    assert nixl_link.nixl_api().wheel == chosen


def test_nixl_missing_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    def nothing(name: str) -> None:
        raise ModuleNotFoundError(name=name.split(".")[0])

    monkeypatch.setattr(nixl_link.importlib, "import_module", nothing)
    with pytest.raises(ModuleNotFoundError, match="pip install nixl-cu13"):
        nixl_link.nixl_api()


def test_a_broken_nixl_wheel_is_not_skipped_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> None:
        raise ModuleNotFoundError("No module named 'ucx_py'", name="ucx_py")

    monkeypatch.setattr(nixl_link.importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="ucx_py"):
        nixl_link.nixl_api()
