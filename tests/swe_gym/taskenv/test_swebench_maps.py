"""Log parser and test command per row from the installed swebench's own tables, with the
row's override first and the default for a repository swebench does not know, each choice
named (``log_parser_choice``, ``test_command_choice``)."""

from __future__ import annotations

import json

import pytest

from swe_gym.grading.testrun import env_prefix, log_parser_choice
from swe_gym.grading.testrun import test_command_choice as command_choice
from swe_gym.taskenv import specs
from swe_gym.tasks import Task, normalise_row

PATCH = "diff --git a/t/test_x.py b/t/test_x.py\n--- a/t/test_x.py\n+++ b/t/test_x.py\n@@ -1 +1,2 @@\n x\n+y\n"


def _task(repo: str, version: str = "", **row) -> Task:
    return normalise_row(
        {
            "instance_id": "r-1",
            "repo": repo,
            "version": version,
            "base_commit": "0" * 40,
            "problem_statement": "",
            "patch": "",
            "test_patch": PATCH,
            "FAIL_TO_PASS": ["a"],
            **row,
        }
    )


@pytest.fixture
def spec_file(tmp_path, monkeypatch):
    def use(table: dict) -> None:
        (tmp_path / "specs.json").write_text(json.dumps(table))
        monkeypatch.setenv(specs.SPECS_ENV, str(tmp_path / "specs.json"))
        specs.clear_caches()

    yield use
    monkeypatch.delenv(specs.SPECS_ENV, raising=False)
    specs.clear_caches()


def test_parsers_come_from_swebenchs_repository_map():
    # pydicom's logs need the options-aware parser: parse_log_pytest read 44 failures as 2
    assert log_parser_choice(_task("pydicom/pydicom")) == (
        "parse_log_pytest_options",
        "swebench repository map",
    )
    assert log_parser_choice(_task("sympy/sympy"))[0] == "parse_log_sympy"
    assert log_parser_choice(_task("django/django"))[0] == "parse_log_django"
    assert log_parser_choice(_task("pylint-dev/astroid"))[0] in (
        "parse_log_pytest",
        "parse_log_astroid",
    )


def test_the_rows_parser_overrides_and_an_unknown_repository_gets_pytests_with_the_reason():
    row = _task("pydicom/pydicom", install_config={"log_parser": "parse_log_pytest"})
    assert log_parser_choice(row) == ("parse_log_pytest", "row install_config")
    v5 = _task("pydicom/pydicom", log_parser="parse_log_pytest_v2")  # a swebench 5 row column
    assert log_parser_choice(v5) == ("parse_log_pytest_v2", "row log_parser")
    name, source = log_parser_choice(_task("me/mine"))
    assert name == "parse_log_pytest" and "me/mine unknown to swebench" in source


def test_test_command_per_repo_and_version_with_the_row_first(spec_file):
    spec_file(
        {
            "pytest-dev/pytest": {
                "5.4": {
                    "test_cmd": "pytest -rA",
                    "eval_commands": ["export LANG=C.UTF-8", "locale-gen"],
                },
                "7.0": {"test_cmd": ["cd x", "pytest -q"]},
            }
        }
    )
    cmd, source = command_choice(_task("pytest-dev/pytest", "5.4"))
    assert cmd == "pytest -rA t/test_x.py" and source == "swebench spec (pytest-dev/pytest 5.4)"
    assert command_choice(_task("pytest-dev/pytest", "7.0"))[0] == "cd x && pytest -q t/test_x.py"
    # eval_commands: only the exports reach the test run (locale-gen needs root)
    assert env_prefix(_task("pytest-dev/pytest", "5.4")) == "export LANG=C.UTF-8; "
    own = _task("pytest-dev/pytest", "5.4", install_config={"test_cmd": "tox -e py"})
    assert command_choice(own) == ("tox -e py t/test_x.py", "row install_config")
    cmd, source = command_choice(_task("pytest-dev/pytest", "9.9"))
    assert cmd == "pytest -rA t/test_x.py" and source.startswith("default")


def test_a_swebench5_rows_eval_script_gives_its_whole_command():
    script = (
        "#!/bin/bash\nset -uxo pipefail\ngit checkout abc t/test_x.py\n"
        ": '>>>>> Start Test Output'\npytest -rA t/test_x.py::test_a\n"
        ": '>>>>> End Test Output'\ngit checkout abc t/test_x.py\n"
    )
    assert command_choice(_task("me/mine", "1.0", eval_script=script)) == (
        "pytest -rA t/test_x.py::test_a",
        "row eval_script",
    )


def test_the_spec_table_source_is_named():
    table, source = specs.spec_table()
    assert isinstance(table, dict) and source  # e.g. "none (swebench 5.0.2 has no ...)"
