"""No import circle between pivot's parts: a static scan of pivot/ with `ast` (nothing is imported).

A part is a sub-package (pivot/X/) or a top-level module (pivot/x.py). Part A depends on part B
when any file of A imports anything of B: at module level, inside a function (a lazy import),
or under `if TYPE_CHECKING:` alike, absolute or relative. A cycle A -> B -> ... -> A fails the
test, printed with the file and line of each import along it. Imports of a part's own modules
are not edges (a package may be layered internally as it likes).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

Edges = dict[str, dict[str, str]]  # part -> part it imports -> "file:line" of the first such import


def _module_name(root: Path, file: Path) -> list[str]:
    parts = list(file.relative_to(root.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported(
    node: ast.Import | ast.ImportFrom, here: list[str], is_package: bool
) -> Iterator[list[str]]:
    """Dotted names `node` may import (for `from M import n`, both M and M.n: n may be a module)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name.split(".")
        return
    if node.level:  # relative: level 1 is this file's package
        base = here if is_package else here[:-1]
        base = base[: len(base) - (node.level - 1)]
    else:
        base = []
    module = base + (node.module.split(".") if node.module else [])
    yield module
    for alias in node.names:
        yield module + [alias.name]


def import_edges(root: Path) -> Edges:
    """Every part-to-part import of the package at `root` (its parts: sub-packages, modules)."""
    top = root.name
    parts = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    parts |= {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    edges: Edges = {}
    for file in sorted(root.rglob("*.py")):
        here = _module_name(root, file)
        if len(here) < 2:
            continue  # the package's own __init__ belongs to no part
        src = here[1]
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in _imported(node, here, file.name == "__init__.py"):
                if len(name) >= 2 and name[0] == top and name[1] in parts and name[1] != src:
                    where = f"{file.relative_to(root.parent)}:{node.lineno}"
                    edges.setdefault(src, {}).setdefault(name[1], where)
    return edges


def find_cycle(edges: Edges) -> list[str] | None:
    """One cycle [A, B, ..., A] of the graph, or None (depth-first search, deterministic order)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return None


def describe(cycle: list[str], edges: Edges, top: str = "pivot") -> str:
    steps = [f"  {top}/{a} -> {top}/{b}   ({edges[a][b]})" for a, b in zip(cycle, cycle[1:])]
    return "import circle " + " -> ".join(f"{top}/{p}" for p in cycle) + ":\n" + "\n".join(steps)


def test_no_import_circle_between_pivots_parts() -> None:
    edges = import_edges(ROOT / "pivot")
    assert edges.get("main"), "the scan found no imports at all: it is broken"
    cycle = find_cycle(edges)
    assert cycle is None, describe(cycle, edges)


def test_runtime_and_rl_import_neither_backend_nor_default_task() -> None:
    # the two circles of issue 30: each would also show as a cycle, this names the rule
    edges = import_edges(ROOT / "pivot")
    assert "emulate" not in edges.get("runtime", {}), edges["runtime"].get("emulate")
    assert "tiny" not in edges.get("rl", {}), edges["rl"].get("tiny")


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "pivot" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pivot"


def test_the_scan_finds_lazy_relative_and_from_package_cycles(tmp_path: Path) -> None:
    # planted: a -> b by a lazy import, b -> c relatively, c -> a by `from pivot import a`
    pkg = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "util.py": "import os\n",
            "a/__init__.py": "",
            "a/x.py": "from pivot.a import y\n\ndef f():\n    import pivot.b.z\n",
            "a/y.py": "from . import x\n",
            "b/__init__.py": "",
            "b/z.py": "from ..c.w import thing\nfrom pivot import util\n",
            "c/__init__.py": "",
            "c/w.py": "from pivot import a\n",
        },
    )
    edges = import_edges(pkg)
    assert edges == {
        "a": {"b": "pivot/a/x.py:4"},
        "b": {"c": "pivot/b/z.py:1", "util": "pivot/b/z.py:2"},
        "c": {"a": "pivot/c/w.py:1"},
    }
    cycle = find_cycle(edges)
    assert cycle == ["a", "b", "c", "a"]
    assert "pivot/a -> pivot/b   (pivot/a/x.py:4)" in describe(cycle, edges)
    del edges["c"]
    assert find_cycle(edges) is None
