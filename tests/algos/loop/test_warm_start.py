"""DAPO's warm start (algos/loop/warm_start.py): the first run builds guided tasks, the oracle's runs
and an RFT model; a later run reuses them; the run's config then points at them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from algos.config import ConfigError
from algos.dapo import DAPOConfig
from algos.loop import warm_start

RECIPE = {
    "synth": {
        "repos": ["starter/durations"],
        "tier": "guided",
        "max_candidates": 3,
        "max_tasks": 2,
    },
    "rl": {"repos": ["starter/tinystats"], "tier": "guided", "max_candidates": 3, "max_tasks": 2},
    "env_kwargs": {"prompt": "compact", "grade_on_truncation": False},
    "max_turns": 3,
    "max_new_tokens": 160,
    "rft": {
        "epochs": 2,
        "probe_contexts": 4,
        "format_patience": 1,
        "batch_size": 2,
        "lr": 1e-3,
        "max_turns": 3,
        "max_new_tokens": 160,
        "max_context_tokens": 1024,
    },
}


def test_unknown_recipe_names_the_bundled_ones():
    with pytest.raises(ConfigError, match="no recipe algos/presets/warm_start_nope.yaml.*guided"):
        warm_start.recipe_path("nope")


def test_cpu_preset_starts_from_the_guided_warm_start():
    from algos.config import parse_config

    cfg = parse_config(
        DAPOConfig, ["--preset", "cpu"], prog="t", description="", prefix="dapo", stages=True
    )
    assert cfg.warm_start == "guided" and warm_start.recipe_path("guided").is_file()


@pytest.mark.slow
def test_warm_start_is_built_once_then_reused(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(warm_start, "cache_root", lambda: tmp_path / "cache")
    recipe = tmp_path / "ws.yaml"
    recipe.write_text(yaml.safe_dump(RECIPE))
    record = warm_start.ensure(str(recipe), "tiny-random")
    assert record["n_tasks"] >= 1 and record["oracle_resolved"] == record["n_tasks"]
    assert Path(record["checkpoint"], "config.json").exists()
    assert record["format_valid"][0][0] == 0  # probed before the first epoch
    assert record["env_kwargs"]["prompt"] == "compact"
    built = sorted(p.name for p in (tmp_path / "cache" / "warm_start").iterdir())
    # the second call reads the record back (nothing rebuilt: the RFT run's files unchanged)
    stamp = Path(record["checkpoint"], "config.json").stat().st_mtime_ns
    assert warm_start.ensure(str(recipe), "tiny-random") == record
    assert Path(record["checkpoint"], "config.json").stat().st_mtime_ns == stamp
    assert sorted(p.name for p in (tmp_path / "cache" / "warm_start").iterdir()) == built
    cfg = warm_start.apply(
        DAPOConfig(
            policy="tiny-random", warm_start=str(recipe), env_kwargs={"max_observation_chars": 500}
        )
    )
    assert cfg.policy == record["checkpoint"] and cfg.warm_start is None
    # RL trains on the rl block's tasks (another repository), not on the warm start's own
    assert cfg.env_kwargs["tasks"] == record["rl_tasks"] != record["tasks"]
    rl_rows = [json.loads(x) for x in Path(record["rl_tasks"]).read_text().splitlines()]
    assert len(rl_rows) == record["n_rl_tasks"] >= 1
    assert {r["repo"] for r in rl_rows}.isdisjoint(
        json.loads(x)["repo"] for x in Path(record["tasks"]).read_text().splitlines()
    )
    assert all((Path(record["repos_dir"]) / r["repo"].replace("/", "__")).is_dir() for r in rl_rows)
    assert cfg.env_kwargs["prompt"] == "compact" and cfg.env_kwargs["max_observation_chars"] == 500
    assert cfg.env_kwargs["sandbox_options"] == {"repos_dir": record["repos_dir"]}
