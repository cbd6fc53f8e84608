"""Red team: the agent lies to the editor through its own shell.

The editor's shell session is the agent's: it may define ``stat``, ``[`` or ``test`` as
functions that answer whatever it likes. What the editor must do with a path (refuse a file over
``MAX_FILE_BYTES``, a FIFO, a directory, a link out) has to come from the trusted side (an fstat
of our own fd, the daemon's stat), so each case first plants the lies, checks that the shell
now lies, and then asserts the editor's answer and, for a huge file, the host's memory.
"""

from __future__ import annotations

import resource
import threading
import tracemalloc
from contextlib import contextmanager

import pytest

from swe_gym.errors import FileTooLarge
from swe_gym.tools.editor import MAX_FILE_BYTES, Editor

# "Everything here is a small regular file": the answers that would make a shell-side check
# read a 700 MB file, open a FIFO or a directory as a file.
LIE_FILE = 'stat() { echo 1; }; [ () { case "$1" in -f|-e) return 0;; *) return 1;; esac; }; '
LIE_FILE += 'test() { [ "$@"; }'
# "Nothing exists": what would let `create` overwrite a file.
LIE_NONE = "[ () { return 1; }; test() { return 1; }"
BIG = 700 << 20
# The memory budget for one read: a refused read holds nothing of the file; an allowed one
# holds at most three copies of <= cap bytes at once (Docker: tarfile's buffered chunks, their
# join and the member's bytes; local: one buffer of cap + 1): 3 x cap. 32 MiB covers the
# allocator, the HTTP client's buffers and the interpreter. Without the trusted-side size check
# the 700 MB file costs ~700 MB here on local and ~1.8 GB on Docker (measured).
RSS_BOUND = 3 * MAX_FILE_BYTES + (32 << 20)
_PAGE = resource.getpagesize()


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


@contextmanager
def memory_growth():
    """Yields a dict that ends up holding, for the block: ``rss``, the peak growth of this
    process's resident memory (the larger of ru_maxrss's growth, blind below an earlier peak,
    and the current RSS sampled every millisecond), and ``traced``, the peak of Python's own
    allocations (tracemalloc: exact, and blind to freed pages the allocator reuses, which can
    hide a few MB from the RSS)."""
    out = {"rss": 0, "traced": 0}
    base, base_max = _rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.001):
            peak[0] = max(peak[0], _rss())

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    tracemalloc.start()
    try:
        yield out
    finally:
        out["traced"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        peak[0] = max(peak[0], _rss())
        done.set()
        t.join()
        grown_max = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base_max
        out["rss"] = max(peak[0] - base, grown_max)


def _mib(m: dict[str, int]) -> str:
    return f"RSS +{m['rss'] / 2**20:.1f} MiB, Python peak {m['traced'] / 2**20:.1f} MiB"


def lying_sb(make_sb, backend, lie: str = LIE_FILE):
    # Local caps each file at 512 MB by default; raised so both backends face the same 700 MB.
    sb = make_sb(**({"file_size_mb": 1024} if backend == "local" else {}))
    r = sb.run(f"truncate -s {BIG} big.txt && mkfifo pipe && mkdir adir && ln -s /etc/hostname out")
    assert r.exit_code == 0, r.output
    sb.run(lie)
    return sb


def test_the_lies_are_in_place(make_sb, backend):
    """The premise of every case below: the agent's shell now answers falsely."""
    sb = lying_sb(make_sb, backend)
    out = sb.run("stat -c %s big.txt; [ -f pipe ] && echo pipe-is-file; [ -d adir ] || echo no-dir")
    assert out.output.split() == ["1", "pipe-is-file", "no-dir"], out.output
    assert sb.run("echo alive").output.endswith("alive\n")  # and the session still works


def test_a_huge_file_is_refused_by_its_real_size_with_memory_bounded(make_sb, backend):
    sb = lying_sb(make_sb, backend)
    ed = Editor(sb)
    calls = [
        {"command": "view", "path": "big.txt"},
        {"command": "view", "path": "big.txt", "view_range": [1, 2]},
        {"command": "str_replace", "path": "big.txt", "old_str": "a", "new_str": "b"},
        {"command": "insert", "path": "big.txt", "insert_line": 0, "new_str": "x"},
    ]
    for args in calls:
        with memory_growth() as grown:
            out = ed(args)
        print(f"{backend} {args['command']} of 700 MB: {_mib(grown)}")
        assert max(grown.values()) < RSS_BOUND, (args, grown)
        assert out == (
            f"ERROR: {sb.workdir}/big.txt is {BIG} bytes, more than the editor handles "
            f"({MAX_FILE_BYTES}); use head, tail or sed -n '10,40p' FILE."
        ), out
    # The reader itself refuses, with both numbers, whoever calls it.
    with pytest.raises(FileTooLarge) as info:
        sb.read_file("big.txt", max_bytes=MAX_FILE_BYTES)
    assert (info.value.size, info.value.limit) == (BIG, MAX_FILE_BYTES)
    assert str(BIG) in str(info.value) and str(MAX_FILE_BYTES) in str(info.value)


def test_a_file_just_over_the_cap_is_refused_and_one_under_it_reads(make_sb, backend):
    sb = lying_sb(make_sb, backend)
    sb.run(f"truncate -s {MAX_FILE_BYTES + 1} over.txt && head -c {MAX_FILE_BYTES} /dev/zero > at")
    with pytest.raises(FileTooLarge):
        sb.read_file("over.txt", max_bytes=MAX_FILE_BYTES)
    assert len(sb.read_file("at", max_bytes=MAX_FILE_BYTES)) == MAX_FILE_BYTES
    assert len(sb.read_file("over.txt")) == MAX_FILE_BYTES + 1  # no limit asked, none applied


def test_special_paths_keep_their_messages_under_lies(make_sb, backend):
    sb = lying_sb(make_sb, backend)
    ed = Editor(sb)
    w = sb.workdir
    out = ed({"command": "view", "path": "pipe"})  # would block if it were opened
    assert out.startswith(f"ERROR: The path {w}/pipe is not a regular file or directory"), out
    out = ed({"command": "str_replace", "path": "adir", "old_str": "a", "new_str": "b"})
    assert out == f"ERROR: The path {w}/adir is a directory; only `view` works on directories."
    out = ed({"command": "view", "path": "adir"})
    assert out.startswith(f"Here are the files and directories up to 2 levels deep in {w}/adir")
    out = ed({"command": "view", "path": "out"})
    assert out.startswith("ERROR") and "outside the workspace" in out, out
    assert sb.run("ls out").exit_code == 0  # the link is left as it was
    out = ed({"command": "view", "path": "missing.py"})
    assert out == f"ERROR: The path {w}/missing.py does not exist. Please provide a valid path."


def test_a_shell_that_says_nothing_exists_cannot_make_create_overwrite(make_sb, backend):
    sb = lying_sb(make_sb, backend, LIE_NONE)
    before = sb.read_file("README.md")
    assert sb.run("[ -e README.md ] || echo gone").output.strip() == "gone"
    out = Editor(sb)({"command": "create", "path": "README.md", "file_text": "pwned"})
    assert out.startswith(f"ERROR: File already exists at: {sb.workdir}/README.md"), out
    assert sb.read_file("README.md") == before


def test_a_big_allowed_file_still_views(make_sb, backend):
    sb = lying_sb(make_sb, backend)
    line = "x" * 999 + "\n"  # long lines: the editor's per-line objects stay few
    n = 9_000_000 // len(line)
    sb.run(f"python3 -c \"import sys; sys.stdout.write('{line[:-1]}\\n' * {n})\" > ok.txt")
    with memory_growth() as grown:
        data = sb.read_file("ok.txt", max_bytes=MAX_FILE_BYTES)
    print(f"{backend} read of 9 MB: {_mib(grown)}")
    assert data == line.encode() * n
    assert max(grown.values()) < RSS_BOUND, grown
    del data
    out = Editor(sb)({"command": "view", "path": "ok.txt", "view_range": [n, -1]})
    assert out == f"Here's the result of running `cat -n` on {sb.workdir}/ok.txt:\n" + (
        f"{n:6}\t{line[:-1]}\n{n + 1:6}\t"
    )
