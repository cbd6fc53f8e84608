"""``path_kind`` and ``read_file(max_bytes=)``: the backend's own answers about a path, on every
backend in ``BACKENDS_UNDER_TEST`` (the editor relies on them instead of the agent's shell)."""

from __future__ import annotations

import io
import pickle
import tarfile

import pytest

from swe_gym.errors import FileTooLarge

SETUP = (
    "mkdir -p d/e && echo hi > d/f && mkfifo fifo && ln -s d/f link_file && ln -s d link_dir "
    "&& ln -s gone broken && ln -s loop2 loop1 && ln -s loop1 loop2 && ln -s fifo link_fifo "
    "&& ln -s /etc out && ln -s ../../../../etc/hostname out_file "
    "&& ln -sfn $PWD/d/f abs_in"
)


def test_path_kind_tells_files_dirs_and_the_rest(make_sb, backend):
    sb = make_sb()
    r = sb.run(SETUP)
    assert r.exit_code == 0, r.output
    w = sb.workdir
    expected = {
        "d/f": "file",
        f"{w}/d/f": "file",
        "pkg/core.py": "file",
        "d": "dir",
        "d/e": "dir",
        ".": "dir",
        w: "dir",
        "d/e/..": "dir",
        "fifo": "other",
        "link_file": "file",  # an in-tree link counts as its target
        "abs_in": "file",  # also through an absolute target inside the tree
        "link_dir": "dir",
        "link_dir/f": "file",
        "link_fifo": "other",
        "broken": "other",  # a dangling link: something is there, but not a file to open
        # Docker's daemon cannot stat a link loop at all (it resolves the link for its header):
        # nothing there, as far as it says; a write would replace the link.
        "loop1": "other" if backend == "local" else None,
        "missing": None,
        "d/missing": None,
        "missing/x": None,
        "d/f/x": None,  # under a file
    }
    got = {p: sb.path_kind(p) for p in expected}
    assert got == expected
    for out in ["out", "out/hostname", "out_file", "/etc/passwd", "../x"]:
        with pytest.raises(ValueError, match="outside the workspace"):
            sb.path_kind(out)
    assert sb.read_file("d/f") == b"hi\n"  # nothing was changed on the way


def test_read_file_max_bytes_refuses_by_the_real_size(make_sb):
    sb = make_sb()
    sb.run("head -c 1000 /dev/zero > k; truncate -s 300M sparse; ln -s sparse link")
    assert sb.read_file("k", max_bytes=1000) == b"\0" * 1000
    assert sb.read_file("k", max_bytes=10**9) == b"\0" * 1000
    for path in ["k", "link"]:
        with pytest.raises(FileTooLarge) as info:
            sb.read_file(path, max_bytes=999 if path == "k" else 10**6)
        e = info.value
        assert isinstance(e, OSError)
        assert (e.size, e.limit) == ((1000, 999) if path == "k" else (300 << 20, 10**6))
        assert f"{e.size} bytes" in str(e) and str(e.limit) in str(e) and "head" in str(e)
    e2 = pickle.loads(pickle.dumps(e))
    assert (type(e2), e2.size, e2.limit, str(e2)) == (FileTooLarge, e.size, e.limit, str(e))
    assert sb.read_file("k", max_bytes=None) == b"\0" * 1000  # the default: no limit
    # A refused read leaves the sandbox usable.
    assert sb.run("echo ok").output == "ok\n" and sb.read_file("k", max_bytes=5000)
    with pytest.raises(IsADirectoryError):
        sb.read_file("pkg", max_bytes=10)


# -- the Docker archive stream, without a daemon ------------------------------------------------


def _tar(size: int, pax: dict[str, str] | None = None, kind: bytes = tarfile.REGTYPE) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("f")
        info.size, info.type, info.pax_headers = size, kind, pax or {}
        tar.addfile(info, io.BytesIO(b"a" * size) if kind == tarfile.REGTYPE else None)
    return buf.getvalue()


class _Counted:
    """Chunks of ``data`` (then zeros forever when ``endless``), counting what was taken."""

    def __init__(self, data: bytes, endless: bool = False):
        self.data, self.endless, self.taken = data, endless, 0

    def __iter__(self):
        for i in range(0, len(self.data), 4096):
            self.taken += len(self.data[i : i + 4096])
            yield self.data[i : i + 4096]
        while self.endless:
            self.taken += 4096
            yield b"\0" * 4096


def test_the_archive_is_read_member_by_header_and_never_past_the_cap():
    from swe_gym.sandbox.docker_files import _TAR_SLACK, _first_file

    assert _first_file(iter(_Counted(_tar(5000))), 5000, "/t/f") == b"a" * 5000
    assert _first_file(iter(_Counted(_tar(5000))), None, "/t/f") == b"a" * 5000
    # A member over the cap: refused from its header, its data not read.
    src = _Counted(_tar(3_000_000), endless=True)
    with pytest.raises(FileTooLarge) as info:
        _first_file(iter(src), 4000, "/t/f")
    assert (info.value.size, info.value.limit) == (3_000_000, 4000)
    assert src.taken < 64 * 1024
    # Headers that go on and on (a huge PAX record): the stream is cut at cap + slack.
    src = _Counted(_tar(10, pax={"comment": "x" * 500_000}), endless=True)
    with pytest.raises(FileTooLarge):
        _first_file(iter(src), 4000, "/t/f")
    assert src.taken <= 4000 + _TAR_SLACK + 4096
    with pytest.raises(IsADirectoryError, match="a directory"):
        _first_file(iter(_Counted(_tar(0, kind=tarfile.DIRTYPE))), 4000, "/t/f")
    with pytest.raises(IsADirectoryError, match="not a regular file"):
        _first_file(iter(_Counted(_tar(0, kind=tarfile.FIFOTYPE))), 4000, "/t/f")
