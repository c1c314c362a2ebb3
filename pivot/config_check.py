"""The config tree's error and its one check, shared by every section's definition
(`pivot/config.py` and its `pivot/config_*.py` sections, and `pivot/engine/config.py`, which the
tree imports: neither may import the other's module for them)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator


class ConfigError(ValueError):
    """A bad configuration value; the message names the field (dotted path) and the value."""


_deferred = contextvars.ContextVar("pivot_config_deferred", default=False)


@contextlib.contextmanager
def deferred_checks() -> Iterator[None]:
    """Skip `__post_init__` checks while tyro builds the tree (it would wrap our one-line
    errors in a box); `PivotConfig.validate` runs them all afterwards."""
    token = _deferred.set(True)
    try:
        yield
    finally:
        _deferred.reset(token)


def check(ok: bool, name: str, value: object, why: str) -> None:
    """Raise ConfigError "name=value: why" unless `ok` (or while checks are deferred)."""
    if not ok and not _deferred.get():
        raise ConfigError(f"{name}={value!r}: {why}")
