"""The result lines of tools/gpu_checks.py: `PASS <name>: <figure>`, `FAIL <name>: <why>` or
`SKIP <name>: <why>`, one per result; `FAILED` names the failed ones (the tool exits 1 on any)."""

from __future__ import annotations

from collections.abc import Callable

FAILED: list[str] = []


def missing(*modules: str) -> str:
    """'' when every module imports, else which one does not and why (for a SKIP line)."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as e:  # not installed, or built against another torch / CUDA
            return f"{module} is not usable ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})"
    return ""


def skip(name: str, why: str) -> None:
    print(f"SKIP {name}: {why}", flush=True)


def report(ok: bool, name: str, text: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'} {name}: {text}", flush=True)
    if not ok:
        FAILED.append(name)


def guarded(name: str, fn: Callable[[], str]) -> None:
    """Run one check; its figure on success, the exception on failure."""
    try:
        report(True, name, fn())
    except Exception as e:  # a failed check is a FAIL line, the others still run
        report(False, name, f"{type(e).__name__}: {e}".splitlines()[0][:300])
