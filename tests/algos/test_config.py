"""Config UX: field docstrings as --help, YAML + presets + CLI layering, validation up front."""

from __future__ import annotations

from pathlib import Path

import pytest

from algos import dapo, grpo, rft
from algos.config import ConfigError, build_parser, field_docs, parse_config
from algos.dapo import DAPOConfig
from algos.grpo import GRPOConfig
from algos.rft import RFTConfig


def _parse(cls, argv, prefix, stages=False):
    return parse_config(cls, argv, prog="t", description="t", prefix=prefix, stages=stages)


def test_field_docstrings_become_help(capsys):
    docs = field_docs(DAPOConfig)
    assert "clip-higher" in docs["eps_high"]
    assert "Seeds torch" in docs["seed"]  # inherited from RunConfig
    with pytest.raises(SystemExit):
        dapo.main(["--help"])
    out = capsys.readouterr().out
    assert "--eps-high" in out and "clip-higher" in out and "--preset" in out and "--stage" in out
    for cls, prefix in ((RFTConfig, "rft"), (GRPOConfig, "grpo")):
        helps = {a.dest: a.help for a in build_parser(cls, "t", "t", prefix)._actions}
        missing = [f for f in field_docs(cls) if f != "resume" and not helps.get(f)]
        assert not missing


def test_shared_fields_have_one_doc_and_each_algorithms_default():
    """GRPO and DAPO declare their shared policy-gradient fields once (PolicyGradientConfig):
    the same --help text for both, each with its own algorithm's default."""
    helps = {
        cls: {a.dest: a.help for a in build_parser(cls, "t", "t", prefix)._actions}
        for cls, prefix in ((DAPOConfig, "dapo"), (GRPOConfig, "grpo"))
    }
    for name, dapo_default, grpo_default in [
        ("iterations", 100, 1600),
        ("filter", "'nonzero_advantage'", "'none'"),
        ("kl_coef", 0.0, 0.04),
        ("lr", 1e-06, 1e-06),
    ]:
        d, g = helps[DAPOConfig][name], helps[GRPOConfig][name]
        assert d.endswith(f"(default: {dapo_default})") and g.endswith(f"(default: {grpo_default})")
        assert d.rsplit(" (default", 1)[0] == g.rsplit(" (default", 1)[0]


def test_layers_defaults_preset_file_cli(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("lr: 3.0e-6\ngroup_size: 4\nbatch_size: 8\n")
    cfg = _parse(
        DAPOConfig,
        [
            "--preset",
            "cpu",
            "--config",
            str(f),
            "--lr",
            "1e-6",
            "--env-kwargs",
            '{"a": 1}',
            "--tasks",
            "x,y",
        ],
        "dapo",
        True,
    )
    assert cfg.policy == "smollm2"  # from the preset
    assert cfg.group_size == 4 and cfg.batch_size == 8  # from the file
    assert cfg.lr == 1e-6  # the command line wins
    assert cfg.env_kwargs == {"a": 1} and cfg.tasks == ["x", "y"]


def test_stage_presets_match_methods():
    s1 = _parse(DAPOConfig, ["--stage", "1"], "dapo", True)
    s2 = _parse(DAPOConfig, ["--stage", "2"], "dapo", True)
    assert (
        s1.max_context_tokens,
        s1.eps_low,
        s1.eps_high,
        s1.max_turns,
        s1.batch_size,
        s1.group_size,
        s1.problems_per_iteration,
    ) == (65536, 0.2, 0.3, 40, 128, 10, 300)
    assert (
        s2.max_context_tokens,
        s2.eps_high,
        s2.max_turns,
        s2.batch_size,
        s2.yarn_factor,
        s2.problems_per_iteration,
    ) == (131072, 0.26, 80, 256, 4.0, 100)
    r = RFTConfig()
    assert (r.lr, r.weight_decay, r.warmup_steps, r.batch_size, r.epochs) == (5e-6, 0.1, 10, 64, 1)
    assert r.learner_config(100).schedule == "cosine"


@pytest.mark.parametrize(
    "cls, kwargs, match",
    [
        (DAPOConfig, {"eps_low": 0.3, "eps_high": 0.2}, "eps_high >= eps_low"),
        (GRPOConfig, {"eps_low": 0.3, "eps_high": 0.2}, "eps_high >= eps_low"),
        (GRPOConfig, {"clip_eps": 0.2, "eps_high": 0.28}, "clip_eps=0.2 and eps_high=0.28"),
        (GRPOConfig, {"clip_eps": 1.0}, r"clip_eps must be in \(0, 1\); got 1.0"),
        (GRPOConfig, {"batch_size": 30, "group_size": 16}, "not divisible by group_size"),
        (GRPOConfig, {"kl_coef": 0.0}, "kl_coef > 0"),
        (GRPOConfig, {"overlong_buffer": 20000}, r"overlong_buffer must be in \[0, max_context"),
        (
            DAPOConfig,
            {"max_new_tokens": 4096, "max_context_tokens": 2048},
            "raise max_context_tokens",
        ),
        (DAPOConfig, {"filter": "nonzero"}, "Did you mean"),
        (DAPOConfig, {"length_threshold": 40, "max_turns": 40}, "length_threshold < max_turns"),
        (DAPOConfig, {"group_size": 1}, "group_size >= 2"),
        (RFTConfig, {"trajectories": ["/nonexistent.jsonl"]}, "does not exist"),
        (DAPOConfig, {"engine": "vlm"}, "Did you mean 'vllm'"),
    ],
)
def test_contradictory_values_fail_clearly(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def clip(cfg) -> tuple[float, float]:
    """The (eps_low, eps_high) a config hands its loss."""
    kw = cfg.learner_config().loss_kwargs
    return kw["eps_low"], kw["eps_high"]


def test_gspo_takes_its_own_clip_unless_the_run_sets_one():
    """GSPO's ratio is a geometric mean over a sequence: PPO's 0.2 would never clip it."""
    assert clip(DAPOConfig()) == (0.2, 0.3) and clip(GRPOConfig()) == (0.2, 0.2)
    for cls in (DAPOConfig, GRPOConfig):
        assert clip(cls(loss="gspo")) == (3e-4, 4e-4)
        assert clip(cls(loss="gspo", eps_high=5e-4)) == (3e-4, 5e-4)  # a side set wins alone
    assert clip(GRPOConfig(loss="gspo", clip_eps=0.1)) == (0.1, 0.1)
    stage1 = _parse(DAPOConfig, ["--stage", "1", "--loss", "gspo"], "dapo", True)
    assert clip(stage1) == (0.2, 0.3)  # the preset sets a range: it is the run's


def test_grpo_takes_an_asymmetric_clip_as_dapo_does():
    assert clip(GRPOConfig(eps_low=0.1, eps_high=0.28)) == (0.1, 0.28)
    assert clip(GRPOConfig(clip_eps=0.15)) == (0.15, 0.15)
    cfg = _parse(GRPOConfig, ["--eps-low", "0.2", "--eps-high", "0.3"], "grpo")
    assert clip(cfg) == (0.2, 0.3)
    assert GRPOConfig(loss="pg").learner_config().loss_kwargs == {}  # no ratio, no clip


@pytest.mark.parametrize("cls", [DAPOConfig, GRPOConfig])
@pytest.mark.parametrize("correction", ["tis", "decoupled"])
def test_sampler_logprobs_with_a_correction_are_refused(cls, correction):
    """With a correction the learner would take each step's own log-probs as the ratio's
    denominator: ratio 1, the clip never acting. The error names both settings and the fix."""
    with pytest.raises(ConfigError) as err:
        cls(old_logprobs="behaviour", off_policy_correction=correction)
    msg = str(err.value)
    assert f"old_logprobs='behaviour' with off_policy_correction='{correction}'" in msg
    assert "use old_logprobs=recompute or auto" in msg and "off_policy_correction=none" in msg
    for old_logprobs in ("recompute", "auto"):
        cls(old_logprobs=old_logprobs, off_policy_correction=correction)
    cls(old_logprobs="behaviour", off_policy_correction="none")
    legacy = cls(old_logprobs="sampler", off_policy_correction="none")  # saved configs
    assert legacy.old_logprobs == "behaviour"
    cls(old_logprobs="behaviour", off_policy_correction=correction, loss="pg")  # pg has no clip


def test_kl_in_dapo_warns_but_is_allowed():
    with pytest.warns(UserWarning, match="no KL term"):
        cfg = DAPOConfig(kl_coef=0.01)
    assert cfg.learner_config().kl_coef == 0.01


def test_bad_values_from_files_and_cli(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("lrr: 1.0\n")
    with pytest.raises(ValueError, match="Did you mean 'lr'"):
        _parse(DAPOConfig, ["--config", str(f)], "dapo")
    with pytest.raises(ConfigError, match="lr: cannot read 'abc'"):
        _parse(DAPOConfig, ["--lr", "abc"], "dapo")
    with pytest.raises(ConfigError, match="no config.yaml"):
        _parse(DAPOConfig, ["--resume", str(tmp_path)], "dapo")


def test_cli_rejects_contradiction_before_any_work(tmp_path: Path):
    run = tmp_path / "run"
    for main, argv in (
        (dapo.main, ["--eps-low", "0.5", "--eps-high", "0.3"]),
        (dapo.main, ["--preset", "cpu", "--off-policy-correction", "tis"]),  # cpu: sampler
        (grpo.main, ["--batch-size", "10", "--group-size", "4"]),
        (rft.main, ["--batch-size", "0"]),
    ):
        with pytest.raises(SystemExit, match="config error"):
            main([*argv, "--run-dir", str(run)])
    assert not run.exists()


@pytest.mark.parametrize("cls", [DAPOConfig, GRPOConfig, RFTConfig])
def test_every_learner_setting_is_reachable_from_the_run_config(cls):
    import dataclasses

    from algos.config.checks import LEARNER_SETTINGS
    from algos.learner.learner_config import LearnerConfig

    run_fields = {f.name for f in dataclasses.fields(cls)}
    fixed = {"schedule", "total_steps", "loss_kwargs", "log_entropy"}  # documented as fixed
    if cls is RFTConfig:  # SFT: its loss and aggregation are the method
        fixed |= {"loss", "agg_mode", "kl_coef", "kl_estimator", "entropy_coef"}
        fixed |= {"off_policy_correction", "is_cap"}
    unreachable = {f.name for f in dataclasses.fields(LearnerConfig)} - run_fields - fixed
    assert unreachable == set(LEARNER_SETTINGS)
    cfg = cls(learner={"logprob_chunk_size": 1024, "betas": [0.8, 0.9], "min_lr_ratio": 0.1})
    built = cfg.learner_config(4) if cls is RFTConfig else cfg.learner_config()
    assert (built.logprob_chunk_size, built.betas, built.min_lr_ratio) == (1024, (0.8, 0.9), 0.1)
    with pytest.raises(ConfigError, match="learner setting 'lr'.*logprob_chunk_size"):
        cls(learner={"lr": 1.0})  # a field the run names itself is set there, once
    with pytest.raises(ConfigError, match="betas must be two floats"):
        cls(learner={"betas": [0.9]})


@pytest.mark.parametrize("cls", [DAPOConfig, GRPOConfig])
def test_learner_fields_are_checked_once_at_config_time(cls):
    # agg_mode, kl_estimator, loss and kl_coef are LearnerConfig's checks, run when the config is
    with pytest.raises(ConfigError, match="agg_mode"):
        cls(agg_mode="sum-of-everything")
    with pytest.raises(ConfigError, match="kl_coef must be >= 0"):
        cls(kl_coef=-1.0)


@pytest.mark.parametrize("field", ["agent", "agent_cmd"])
def test_rft_refuses_an_agent_beside_saved_trajectories(tmp_path: Path, field):
    saved = tmp_path / "t.jsonl"
    saved.write_text("")
    value = "examples.openai_agent:make_agent" if field == "agent" else "bash run.sh"
    with pytest.raises(ConfigError, match=f"{field}=.*trajectories=.*pass one or the other"):
        RFTConfig(trajectories=[str(saved)], **{field: value})
