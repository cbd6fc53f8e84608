"""Where a task's recipe comes from, the key its environment is cached by, when the host's
interpreter is kept, and which interpreter a recipe gets (no sandbox, no build)."""

from __future__ import annotations

import json
import sys

import pytest

from swe_gym.taskenv import overrides, specs, uses_host
from swe_gym.taskenv.pythons import PythonNotFound, choose, installed
from swe_gym.taskenv.recipe import Recipe, host_satisfies, inputs_digest, recipe_for
from swe_gym.tasks import normalise_row

HOST = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _task(**row):
    base = {
        "instance_id": "r-1",
        "repo": "me/lib",
        "base_commit": "0" * 40,
        "problem_statement": "",
        "patch": "",
        "test_patch": "",
        "FAIL_TO_PASS": ["a"],
    }
    return normalise_row({**base, **row})


def test_the_rows_install_config_first_then_swebenchs_spec_then_none(tmp_path, monkeypatch):
    table = {
        "me/lib": {
            "1.0": {
                "python": "3.9",
                "pip_packages": ["pytest==7.4.4"],
                "packages": "requirements.txt",
                "install": "pip install -e .",
            }
        }
    }
    (tmp_path / "s.json").write_text(json.dumps(table))
    monkeypatch.setenv(specs.SPECS_ENV, str(tmp_path / "s.json"))
    specs.clear_caches()
    try:
        reqs = lambda commit, path: "six==1.16.0\n" if path == "requirements.txt" else None  # noqa: E731
        r = recipe_for(
            _task(version="1.0", environment_setup_commit="e" * 40),
            reqs,
            lambda c: "2021-03-04T05:06:07+00:00",
        )
        assert (r.source, r.python, r.packages, r.install) == (
            "swebench",
            "3.9",
            ["pytest==7.4.4"],
            "pip install -e .",
        )
        assert r.requirements == {"requirements.txt": "six==1.16.0\n"}
        assert r.setup_commit == "e" * 40 and r.exclude_newer == "2021-03-04"
        own = recipe_for(_task(version="1.0", install_config={"python": "3.8"}))
        assert own.source == "install_config" and own.python == "3.8"
        assert recipe_for(_task(version="2.0")).source == "none"
    finally:
        monkeypatch.delenv(specs.SPECS_ENV)
        specs.clear_caches()


def test_the_key_is_the_recipes_not_the_instances():
    cfg = {"python": "3.9", "pip_packages": ["pytest==7.4.4"]}
    a = recipe_for(_task(instance_id="a-1", install_config=cfg))
    b = recipe_for(_task(instance_id="b-2", install_config=cfg, test_patch=""))
    assert a.key == b.key
    changed = recipe_for(_task(install_config={**cfg, "pip_packages": ["pytest==7.4.3"]}))
    assert changed.key != a.key  # a changed install_config never reuses the old environment
    dated = recipe_for(_task(install_config=cfg, created_at="2020-01-02T00:00:00Z"))
    assert dated.exclude_newer == "2020-01-02" and dated.key != a.key


def test_a_conda_recipe_is_named_as_unbuildable():
    r = recipe_for(_task(install_config={"python": "3.9", "packages": "environment.yml"}))
    assert any("environment.yml" in u for u in r.unsupported)


def test_the_host_is_kept_only_when_it_meets_the_recipe():
    assert host_satisfies(Recipe("install_config", python=HOST, packages=["pytest"]))
    assert not host_satisfies(Recipe("install_config", packages=["pytest==7.4.4"]))  # host: newer
    assert not host_satisfies(Recipe("install_config", python="3.9"))
    assert not host_satisfies(Recipe("install_config", install="pip install -e ."))
    assert not host_satisfies(Recipe("install_config", packages=["no-such-dist-here"]))
    starter = _task(repo="starter/tinystats", install_config={"python": "3.9"})
    assert uses_host(starter, recipe_for(starter), "auto")  # the bundled suite: the host's
    pinned = _task(install_config={"python": "3.9"})
    assert not uses_host(pinned, recipe_for(pinned), "auto")
    assert uses_host(pinned, recipe_for(pinned), "host")
    with pytest.raises(ValueError, match="environment"):
        uses_host(pinned, recipe_for(pinned), "conda")


def test_interpreters_come_from_the_machine_and_a_missing_one_is_named():
    found = installed()
    assert found and all(i.path.startswith("/") for i in found)
    exact, note = choose(HOST)
    assert exact.minor == HOST and note == ""
    with pytest.raises(PythonNotFound) as err:
        choose("3.99")
    msg = str(err.value)
    assert "3.99" in msg and "pyenv install 3.99" in msg and "allow_nearest_python" in msg
    nearest, note = choose("3.99", allow_nearest=True)
    assert nearest.version[0] == 3 and "nearest" in note
    with pytest.raises(PythonNotFound, match="uv cannot make environments for Python 2.7"):
        choose("2.7", allow_nearest=True)


def test_rows_whose_install_reads_the_same_files_share_an_environment():
    cfg = {"python": "3.9", "install": "pip install -e ."}
    trees = {
        "a" * 40: [("setup.py", "s1"), ("lib/x.py", "x1")],
        "b" * 40: [("setup.py", "s1"), ("lib/x.py", "x2")],  # only code changed
        "c" * 40: [("setup.py", "s2"), ("lib/x.py", "x2")],  # the setup file changed
        "d" * 40: [("setup.py", "s1"), ("lib/x.py", "x1"), ("lib/_speed.c", "c1")],
    }
    inputs = lambda commit: inputs_digest(trees[commit])  # noqa: E731
    key = {
        c: recipe_for(_task(instance_id=f"r-{c[0]}", base_commit=c, install_config=cfg),
                      install_inputs=inputs)
        for c in trees
    }  # fmt: skip
    assert key["a" * 40].install_commit == "a" * 40  # the base commit, as SWE-bench installs
    assert key["a" * 40].key == key["b" * 40].key
    assert key["c" * 40].key != key["a" * 40].key and key["d" * 40].key != key["a" * 40].key
    # without a clone to read the inputs from, the commit itself keys it
    alone = [recipe_for(_task(base_commit=c, install_config=cfg)).key for c in ("a" * 40, "b" * 40)]
    assert alone[0] != alone[1]


def test_overrides_by_repository_version_and_row(tmp_path, monkeypatch):
    table = {
        "me/lib": {"seed": ["setuptools<60"], "pip_packages": ["lib-data"]},
        "me/lib@1.0": {"install_at": "setup"},
        "r-2": {"seed": ["setuptools<58"], "build_constraints": False},
    }
    (tmp_path / "o.json").write_text(json.dumps(table))
    monkeypatch.setenv(overrides.OVERRIDES_ENV, str(tmp_path / "o.json"))
    overrides.clear_cache()
    cfg = {"python": "3.9", "install": "pip install -e ."}
    row = {"version": "1.0", "environment_setup_commit": "e" * 40, "install_config": cfg}
    one = recipe_for(_task(**row))
    assert one.seed == ["setuptools<60"] and one.extra_packages == ["lib-data"]
    assert one.install_commit == "e" * 40 and one.build_constraints
    two = recipe_for(_task(instance_id="r-2", **row))
    assert two.seed == ["setuptools<58"] and not two.build_constraints
    other = recipe_for(_task(**{**row, "version": "2.0"}))
    assert other.install_commit == "0" * 40  # the base commit: no version entry applies
    own = recipe_for(_task(**{**row, "install_config": {**cfg, "install_at": "base"}}))
    assert own.install_commit == "0" * 40  # the row's own install_config wins


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"me/lib": {"seeds": ["pip<20"]}}, r"'seeds'.*accepted: seed, pip_packages"),
        ({"me/lib": {"install_at": "head"}}, r"install_at='head'; accepted: base, setup"),
        ({"me/lib": {"seed": "pip<20"}}, r"seed must be a list"),
        (["me/lib"], r"expected a mapping"),
    ],
)
def test_a_malformed_override_names_the_field(tmp_path, monkeypatch, table, match):
    (tmp_path / "o.json").write_text(json.dumps(table))
    monkeypatch.setenv(overrides.OVERRIDES_ENV, str(tmp_path / "o.json"))
    overrides.clear_cache()
    with pytest.raises(overrides.OverridesError, match=match):
        recipe_for(_task(install_config={"python": "3.9"}))
