"""The emulation backend is handed to the runtime (pivot/runtime/job/backend.py): pivot/main.py picks
`EmulatedDevices` for `--cluster.device emulated` and nothing otherwise; the runtime refuses an
emulated config without one; the backend has every method of the protocol, with its parameters."""

from __future__ import annotations

import inspect

import pytest

from pivot import main as entry
from pivot.config import PivotConfig
from pivot.emulate.backend import EmulatedDevices
from pivot.runtime.job import launch
from pivot.runtime.job.backend import DeviceBackend


def _methods(cls: type) -> dict[str, list[str]]:
    methods = {name: f for name, f in vars(cls).items() if callable(f) and not name.startswith("_")}
    return {name: list(inspect.signature(f).parameters) for name, f in methods.items()}


def test_the_backend_implements_the_protocol() -> None:
    wanted = _methods(DeviceBackend)
    assert set(wanted) == {
        "runtime_config",
        "controller_parts",
        "cost_model",
        "install",
        "finish",
        "summary_lines",
    }
    got = _methods(EmulatedDevices)
    assert {name: got.get(name) for name in wanted} == wanted


@pytest.mark.parametrize(
    ("flags", "backend"), [([], type(None)), (["--cluster.device", "emulated"], EmulatedDevices)]
)
def test_main_hands_the_backend_to_the_runtime(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], backend: type
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    handed = []
    monkeypatch.setattr(launch, "run", lambda cfg, b=None: handed.append(b) or 0)
    assert entry.main([*flags, "--train.devices", "2"]) == 0
    assert len(handed) == 1 and type(handed[0]) is backend


def test_the_runtime_refuses_an_emulated_config_without_a_backend() -> None:
    cfg = PivotConfig()
    cfg.cluster.device = "emulated"
    with pytest.raises(ValueError, match="emulation backend"):
        launch.run(cfg)
