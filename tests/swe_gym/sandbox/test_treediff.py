"""The trusted side of the diff: an archive written out as data, a diff process bounded."""

from __future__ import annotations

import io
import os
import tarfile
import time

import pytest

from swe_gym.errors import DiffError, SandboxError
from swe_gym.sandbox.treediff import extract_archive, run_bounded


def _tar(members: list[tuple[str, str, bytes | str]]) -> list[bytes]:
    """(kind, name, data or link target) -> the archive in 1 KiB chunks, as the daemon streams."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for kind, name, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o644
                tar.addfile(info, io.BytesIO(data))  # type: ignore[arg-type]
                continue
            info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
                         "fifo": tarfile.FIFOTYPE}[kind]  # fmt: skip
            info.linkname = data if isinstance(data, str) else ""
            tar.addfile(info)
    raw = buf.getvalue()
    return [raw[i : i + 1024] for i in range(0, len(raw), 1024)]


def test_members_are_written_as_data_and_never_through_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "tree"
    dest.mkdir()
    chunks = _tar([
        ("dir", "testbed", b""),
        ("file", "testbed/a.py", b"print(1)\n"),
        ("file", "testbed/run.sh", b"#!/bin/sh\n"),
        ("sym", "testbed/out", str(outside)),
        ("file", "testbed/out/planted", b"x"),  # under a symlink: skipped
        ("file", "testbed/../escape", b"x"),
        ("file", "testbed/.git/config", b"[core]\n\tfsmonitor = touch /tmp/pwned\n"),
        ("hard", "testbed/b.py", "testbed/a.py"),
        ("fifo", "testbed/pipe", b""),
        ("file", "testbed/na\udcefve.txt", b"caf\xe9\n"),
    ])  # fmt: skip
    written = extract_archive(chunks, str(dest), deadline=time.monotonic() + 60)
    assert (dest / "a.py").read_bytes() == b"print(1)\n" and (
        dest / "b.py"
    ).read_bytes() == b"print(1)\n"
    assert os.access(dest / "run.sh", os.X_OK) and not os.access(dest / "a.py", os.X_OK)
    assert os.readlink(dest / "out") == str(outside) and list(outside.iterdir()) == []
    assert not (tmp_path / "escape").exists() and not (dest / ".git").exists()
    assert not (dest / "pipe").exists()
    assert (dest / os.fsdecode(b"na\xefve.txt")).read_bytes() == b"caf\xe9\n"
    # Counted toward the bound: every regular file in the tree, the skipped one under a link too.
    assert written == len(b"print(1)\n") + len(b"#!/bin/sh\n") + len(b"x") + len(b"caf\xe9\n")


def test_the_size_bound_and_the_deadline_stop_the_copy(tmp_path):
    big = _tar([("file", "testbed/big", b"\0" * 5000)])
    with pytest.raises(DiffError) as e:
        extract_archive(big, str(tmp_path), max_bytes=4096, deadline=time.monotonic() + 60)
    assert e.value.end_reason == "workspace_too_large"

    def slow():
        yield big[0]
        time.sleep(0.3)
        yield from big[1:]

    (tmp_path / "t2").mkdir()
    with pytest.raises(DiffError) as e:
        extract_archive(slow(), str(tmp_path / "t2"), deadline=time.monotonic() + 0.1)
    assert e.value.end_reason == "diff_timed_out"


def test_run_bounded_caps_output_and_time_and_reports_failures():
    env = {"PATH": os.environ["PATH"]}
    assert run_bounded(["printf", "abc"], env, timeout=30, max_bytes=3) == b"abc"
    t0 = time.monotonic()
    with pytest.raises(DiffError) as e:
        run_bounded(["sh", "-c", "yes | head -c 50000000"], env, timeout=30, max_bytes=1 << 20)
    assert e.value.end_reason == "patch_too_large" and time.monotonic() - t0 < 30
    with pytest.raises(DiffError) as e:
        run_bounded(["sh", "-c", "sleep 30 & sleep 30"], env, timeout=0.5, max_bytes=1 << 20)
    assert e.value.end_reason == "diff_timed_out"
    with pytest.raises(SandboxError, match="exit 3.*boom"):
        run_bounded(["sh", "-c", "echo boom >&2; exit 3"], env, timeout=30, max_bytes=1 << 20)
