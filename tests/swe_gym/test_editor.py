"""``str_replace_editor`` on a real local sandbox: results, side effects, and errors as text."""

from __future__ import annotations

import pytest

from swe_gym.sandbox import make_sandbox
from swe_gym.tasks import normalise_row
from swe_gym.tools.editor import MAX_VIEW_CHARS, Editor


@pytest.fixture
def sb(mini_repo):
    row, repos = mini_repo
    sandbox = make_sandbox(normalise_row(row), "local", repos_dir=str(repos))
    sandbox.start()
    yield sandbox
    sandbox.close()


def cwd(sandbox) -> str:
    return sandbox.run("pwd").output.strip().splitlines()[-1]


def test_no_editor_command_moves_the_shell(sb):
    ed = Editor(sb)
    sb.run("mkdir -p sub/deeper && cd sub")
    before = cwd(sb)
    calls = [
        {"command": "view", "path": sb.workdir},
        {"command": "view", "path": f"{sb.workdir}/tests"},
        {"command": "view", "path": "calc.py"},
        {"command": "create", "path": "sub/deeper/new.py", "file_text": "x = 1\n"},
        {
            "command": "str_replace",
            "path": "sub/deeper/new.py",
            "old_str": "x = 1",
            "new_str": "x = 2",
        },
        {"command": "insert", "path": "sub/deeper/new.py", "insert_line": 0, "new_str": "# top"},
        {"command": "undo_edit", "path": "sub/deeper/new.py"},
        {"command": "view", "path": "nope"},
    ]
    outs = [ed(a) for a in calls]
    assert f"{sb.workdir}/tests/test_calc.py" in outs[1]
    assert not any(o.startswith("ERROR") for o in outs[:-1]), outs
    assert cwd(sb) == before and before.endswith("/sub")


def test_file_errors_are_results_not_exceptions(sb):
    ed = Editor(sb)
    sb.run("ln -s /etc/hostname out && ln -s /etc out_dir && mkfifo pipe && ln -s gone dangling")
    sb.run("printf 'a\\0b' > bin.dat && mkdir adir")
    cases = {
        "view out": {"command": "view", "path": "out"},
        "edit out": {"command": "str_replace", "path": "out", "old_str": "a", "new_str": "b"},
        "view out_dir/passwd": {"command": "view", "path": "out_dir/passwd"},
        "create in out_dir": {"command": "create", "path": "out_dir/x", "file_text": "x"},
        "view pipe": {"command": "view", "path": "pipe"},
        "create pipe": {"command": "create", "path": "pipe", "file_text": "x"},
        "create dangling": {"command": "create", "path": "dangling", "file_text": "x"},
        "binary": {"command": "view", "path": "bin.dat"},
        "dir edit": {"command": "str_replace", "path": "adir", "old_str": "a", "new_str": "b"},
        "outside": {"command": "view", "path": "/etc/passwd"},
        "nul in path": {"command": "view", "path": "calc\x00.py"},
        "surrogate text": {"command": "create", "path": "s.py", "file_text": "x = '\ud800'"},
    }
    for name, args in cases.items():
        out = ed(args)
        assert out.startswith("ERROR"), (name, out)
        assert "root:" not in out, name  # no host file content
    assert "not a regular file" in ed(cases["view pipe"])
    assert sb.run("test -e s.py; echo $?").output.strip().endswith("1")  # nothing written


def test_an_edit_keeps_the_bytes_it_did_not_touch(sb):
    ed = Editor(sb)
    sb.run("printf '# caf\\xe9\\nx = 1\\n' > latin.py")
    out = ed({"command": "str_replace", "path": "latin.py", "old_str": "x = 1", "new_str": "x = 2"})
    assert "x = 2" in out and "\ufffd" in out  # shown with a replacement character
    assert sb.read_file(f"{sb.workdir}/latin.py") == b"# caf\xe9\nx = 2\n"


def test_outputs_are_bounded(sb):
    ed = Editor(sb)
    sb.run("python3 -c \"open('big.py','w').write('y = 0\\n' * 200000)\"")
    view = ed({"command": "view", "path": "big.py"})
    assert "<response clipped" in view and len(view) < MAX_VIEW_CHARS + 500
    miss = ed(
        {"command": "str_replace", "path": "big.py", "old_str": "z" * 1_000_000, "new_str": ""}
    )
    assert miss.startswith("ERROR") and len(miss) < 5_000
    many = ed({"command": "str_replace", "path": "big.py", "old_str": "y = 0", "new_str": ""})
    assert "Multiple occurrences" in many and len(many) < 5_000
    ed({"command": "insert", "path": "big.py", "insert_line": 0, "new_str": "top = 1"})
    undo = ed({"command": "undo_edit", "path": "big.py"})
    assert "undone" in undo and len(undo) < MAX_VIEW_CHARS + 500
    sb.run("truncate -s 20M huge.txt")
    assert "more than the editor handles" in ed({"command": "view", "path": "huge.txt"})
