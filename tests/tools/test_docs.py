"""The docs stay a house a newcomer can read: a short README whose relative links (files and
heading anchors) all resolve, whose test command is the one CI runs, and no orphan docs page.

The anchor rule is GitHub's (lower case, punctuation other than '-' and '_' dropped, spaces to
'-', a repeated heading gets '-1', '-2', ...), written here from its documented behaviour.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 200

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`]*`")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks (a '#' in a shell block is no heading)."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def _slug(heading: str) -> str:
    text = heading.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose_lines(path):
        m = HEADING.match(line)
        if not m:
            continue
        slug = _slug(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(path: Path) -> list[str]:
    out = []
    for line in _prose_lines(path):
        # a link's text may be a code span; the target never is
        out += LINK.findall(CODE_SPAN.sub("``", line))
    return out


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _broken(path: Path) -> list[str]:
    bad = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target}: no file {_shown(dest)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with anchor #{anchor} in {_shown(dest)}")
    return bad


def readme_test_command() -> str:
    """The one command line in the code block that follows 'Run the tests'."""
    text = README.read_text(encoding="utf-8")
    m = re.search(r"^Run the tests.*?\n```[a-z]*\n(.*?)\n```", text, re.DOTALL | re.MULTILINE)
    assert m, "README.md has no 'Run the tests' paragraph followed by a code block"
    lines = [ln.strip() for ln in m.group(1).splitlines() if ln.strip()]
    assert len(lines) == 1, f"README's test block should hold one command, holds {lines}"
    return lines[0]


def test_readme_is_short() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n < MAX_README_LINES, (
        f"README.md has {n} lines; move detail into docs/ (limit {MAX_README_LINES})"
    )


def test_slug_follows_github() -> None:
    assert (
        _slug("Install (CUDA 13 driver, Linux x86_64, CPython 3.11)")
        == "install-cuda-13-driver-linux-x86_64-cpython-311"
    )
    assert _slug("What a run leaves in `runs/latest/`") == "what-a-run-leaves-in-runslatest"
    assert _slug("2026-11-30: the planner's penalty") == "2026-11-30-the-planners-penalty"


def test_link_checker_catches_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A part\n")
    page.write_text(
        "# Page\n\n[ok](other.md#a-part) [gone](missing.md) [no anchor](other.md#nope)\n"
        "[self](#page) [web](https://example.com)\n```\n[in code](nowhere.md)\n```\n"
    )
    targets = links(page)
    assert targets == [
        "other.md#a-part",
        "missing.md",
        "other.md#nope",
        "#page",
        "https://example.com",
    ]
    assert [b.split(":")[0] for b in _broken(page)] == ["missing.md", "other.md#nope"]


def test_every_relative_link_resolves() -> None:
    bad = {_shown(p): _broken(p) for p in [README, *DOCS]}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"broken relative links: {bad}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {
        (ROOT / t.partition("#")[0]).resolve() for t in links(README) if not t.startswith("#")
    }
    orphans = [p.name for p in DOCS if p.resolve() not in linked]
    assert not orphans, f"docs pages not linked from README.md's Documentation list: {orphans}"


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    cmd = readme_test_command()
    assert cmd in [ln.strip() for ln in ci], (
        f".ci/run does not run the README's test command {cmd!r}"
    )
    pytest_lines = [ln.strip() for ln in ci if "pytest" in ln and not ln.lstrip().startswith("#")]
    assert pytest_lines == [cmd], f".ci/run runs pytest as {pytest_lines}, the README as {cmd!r}"


def test_the_readmes_venv_is_ignored_by_git() -> None:
    """The README makes `.venv/` in the clone: `git status` must not list it (nor `git add -A`
    commit a torch)."""
    import subprocess

    if not (ROOT / ".git").exists():
        return  # an exported tree: nothing to ignore for
    assert "python3.11 -m venv .venv" in README.read_text(encoding="utf-8")
    out = subprocess.run(["git", "check-ignore", "-q", ".venv/bin/python"], cwd=ROOT, check=False)
    assert out.returncode == 0, ".venv/ is not in .gitignore"
