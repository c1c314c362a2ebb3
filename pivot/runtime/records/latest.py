"""`runs/` and its `latest` link: where runs without `--log.dir` get their folders, and the link
to the newest one (what `tools/plot_timeline.py runs/latest/timeline.jsonl` and the docs name)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

RUNS = Path("runs")  # relative: under the folder the job is started from, as before
LATEST = "latest"


def latest_run(root: Path = RUNS) -> Path:
    """The folder `root/latest` links to, named through `root` (the link is relative); the link
    itself where it is not one (missing, or a folder an earlier Pivot wrote runs into)."""
    link = root / LATEST
    if not link.is_symlink():
        return link
    return root / os.readlink(link)  # an absolute target replaces `root`


def point_latest(root: Path, folder: Path) -> str | None:
    """Make `root/latest` link to `folder` (a folder in `root`), atomically: the link is made
    under a name of its own and renamed over the old one, so a reader never finds none. Returns
    why not in one line where `root/latest` is a real folder (an earlier Pivot's run: kept)."""
    link = root / LATEST
    if link.exists() and not link.is_symlink():
        return (
            f"pivot: {link} is a run folder of an earlier Pivot (not a link), left as it is; "
            f"this run's folder is {folder}"
        )
    tmp = root / f".{LATEST}-{uuid.uuid4().hex}"
    os.symlink(folder.name, tmp)  # relative: `runs/` can be moved or mounted elsewhere
    os.replace(tmp, link)
    return None
