"""``python -m swe_gym.validate ROWS --repos-dir D --official``: per row the environment (and
its build time, or why it cannot be built), the parser and command with their sources, and the
project's verdict beside swebench's own on the same log, for the empty and the gold patch."""

from __future__ import annotations

import json

from swe_gym.validate import main


def test_validate_reports_env_parser_command_and_both_verdicts(oldpy, tmp_path, capsys):
    row, repos = oldpy
    conda = {
        **row,
        "instance_id": "gen__oldpy-conda",
        "install_config": {**row["install_config"], "packages": "environment.yml"},
    }
    py27 = {
        **row,
        "instance_id": "gen__oldpy-py27",
        "install_config": {**row["install_config"], "python": "2.7"},
    }
    unknown = {**row, "instance_id": "gen__gone-1", "repo": "gen/gone"}
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in (row, conda, py27, unknown)))
    out_json = tmp_path / "out.jsonl"
    code = main(
        [str(rows), "--repos-dir", repos, "--official", "--jobs", "1", "--json", str(out_json)]
    )
    out = capsys.readouterr().out
    assert code == 1
    res = {r["instance_id"]: r for r in map(json.loads, out_json.read_text().splitlines())}
    ok = res["gen__oldpy-1"]
    assert (
        ok["ok"]
        and ok["agree"]
        and ok["env"].endswith(tuple("0123456789"))
        and "python 3.9." in ok["env"]
    )
    assert ok["verdicts"] == {
        "empty": {"ours": False, "swebench": False},
        "gold": {"ours": True, "swebench": True},
    }
    assert ok["parser"] == "parse_log_pytest [row install_config]"
    assert ok["command"].startswith("pytest -rA -p no:cacheprovider tests/test_oldpy.py [row")
    assert "environment.yml" in res["gen__oldpy-conda"]["env"]
    assert (
        "Python 2.7" in res["gen__oldpy-py27"]["env"] and "docker" in res["gen__oldpy-py27"]["env"]
    )
    assert "no local git repository for 'gen/gone'" in res["gen__gone-1"]["env"]
    assert "agreement with swebench's verdict: 1/1 rows" in out and "not built: 3" in out
    assert "empty: ours False swebench False, gold: ours True swebench True" in out
