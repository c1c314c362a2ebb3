"""The NIXL buffer record in the c10d store (pivot/gps/nixl_link.py): typed MessagePack, never a
pickle; with the job secret, a record not written by this job or moved to another key is refused."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from pivot.gps.nixl_link import RemoteBuffer, pack_remote, unpack_remote

SECRET = b"job-secret-0123456789"
INFO = RemoteBuffer("pivot-x-r0", b"\x00agent-md\xff", 0x7F0000001000, 1 << 30)


def test_round_trip_signed_and_unsigned() -> None:
    assert unpack_remote("gps/policy/0", pack_remote("gps/policy/0", INFO, SECRET), SECRET) == INFO
    assert unpack_remote("gps/policy/0", pack_remote("gps/policy/0", INFO, None), None) == INFO


def test_forged_moved_or_pickled_records_are_refused(tmp_path: Path) -> None:
    raw = pack_remote("gps/policy/0", INFO, SECRET)
    with pytest.raises(ValueError, match="fails authentication"):  # another job's (or nobody's) key
        unpack_remote(
            "gps/policy/0", pack_remote("gps/policy/0", INFO, b"another-secret-000000"), SECRET
        )
    with pytest.raises(
        ValueError, match="fails authentication"
    ):  # a genuine record under another key
        unpack_remote("gps/genrm/0", raw, SECRET)
    with pytest.raises(
        ValueError, match="fails authentication"
    ):  # unsigned, where the job has a secret
        unpack_remote("gps/policy/0", pack_remote("gps/policy/0", INFO, None), SECRET)
    target = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple:
            return open, (str(target), "w")

    for secret in (SECRET, None):
        with pytest.raises(ValueError, match="not a Pivot buffer record"):
            unpack_remote("gps/policy/0", pickle.dumps(Evil()), secret)
        with pytest.raises(ValueError, match="malformed"):
            unpack_remote("gps/policy/0", b"PVN1" + pickle.dumps(Evil()), None)
    assert not target.exists()
