"""Make `import verl.tools.base_tool` work for a veRL tool file: veRL itself when it imports,
else Pivot's stand-in (`pivot/tools/verl_shim/verl`).

veRL's package does not import on a machine without its heavy dependencies: `verl/__init__.py`
imports `verl.protocol`, which imports ray (0.6.1: verl/__init__.py:23 -> verl/protocol.py:29).
A veRL tool file needs only `verl.tools.base_tool`, `verl.tools.schemas`,
`verl.utils.rollout_trace` and `verl.utils.reward_score.gsm8k`, so Pivot ships those and puts
them first on sys.path when the real package fails. A real veRL that imports is always
preferred: its classes are the ones its tool files were written against.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent / "verl_shim"
"""The folder that holds the stand-in package `verl/` (put on sys.path as it is)."""
REAL = "verl"
SHIM = "pivot shim"


def _loaded_from_shim() -> bool:
    module = sys.modules.get("verl")
    where = getattr(module, "__file__", None) if module is not None else None
    return where is not None and Path(where).resolve().is_relative_to(SHIM_DIR)


def _forget_verl() -> None:
    # a failed `import verl.tools.base_tool` leaves `verl` (and whatever it had imported before
    # the failure) in sys.modules; the shim's `verl` must not be mixed with them
    for name in [n for n in sys.modules if n == "verl" or n.startswith("verl.")]:
        del sys.modules[name]


def ensure_verl_importable() -> str:
    """Make `verl.tools.base_tool` importable; say which package provides it: "verl" (the real
    package, with its dependencies) or "pivot shim". Idempotent: once a package is chosen, later
    calls keep it."""
    if _loaded_from_shim():
        return SHIM
    try:
        importlib.import_module("verl.tools.base_tool")
        return REAL
    except Exception:  # not installed, or a dependency missing (ray, omegaconf, ...) or broken
        pass
    _forget_verl()
    shim = str(SHIM_DIR)
    if shim in sys.path:
        sys.path.remove(shim)
    sys.path.insert(0, shim)
    importlib.invalidate_caches()
    importlib.import_module("verl.tools.base_tool")
    return SHIM
