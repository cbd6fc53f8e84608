"""What the GRPO and DAPO configs share: their fields, checks and the LearnerConfig they imply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from algos import objectives
from algos.config import ConfigError, require_at_least
from algos.config.branching import check_branching
from algos.config.run import RLConfig
from algos.learner.learner_config import LearnerConfig
from swe_gym.errors import unknown_choice

ON_EXHAUSTED = ("error", "skip")
OLD_LOGPROBS = ("auto", "behaviour", "recompute")
# the value "behaviour" had before it was named for the policy (configs saved by earlier runs)
OLD_LOGPROBS_ALIASES = {"sampler": "behaviour"}


@dataclass
class PolicyGradientConfig(RLConfig):
    """The policy-gradient fields GRPO and DAPO share, declared once with their checks.

    The defaults are plain GRPO's (SWE-RL where published: 1,600 iterations of 32 tasks x 16
    episodes; DeepSeekMath's beta 0.04 and lr 1e-6; docs/methods.md#grpo). An algorithm's config
    re-declares a field only to change its default, in one line with no docstring: the docstring
    here is the field's ``--help`` text for every algorithm."""

    iterations: int = 1600
    """Training iterations (rollouts, then up to max_steps_per_iteration optimiser steps each)."""
    problems_per_iteration: int = 32
    """Tasks sampled per iteration (before refills)."""
    group_size: int = 16
    """Episodes per task (G); advantages are normalised within a group."""
    max_steps_per_iteration: int = 1
    """At most this many optimiser steps per iteration (kept samples // batch_size of them, at
    least one; the kept samples split evenly over them)."""
    filter: str = "none"
    """Which samples are dropped before the update: nonzero_advantage (zero-advantage samples,
    Nebius), nonconstant_group (groups whose rewards are all equal, DAPO) or none."""
    max_refill_rounds: int = 0
    """Extra rollout rounds (more problems) when fewer than batch_size samples survive the
    filter."""
    refill_problems: int | None = None
    """Tasks per refill round (default: problems_per_iteration)."""
    on_exhausted: str = "error"
    """After the last refill round with too few samples: error (stop with a clear message) or
    skip (count the iteration as skipped and go on)."""
    normalize_std: bool = True
    """Divide advantages by the group std (false: mean-centred only)."""
    length_penalty: bool = False
    """Add the turn-based length penalty to the reward, multi-turn envs
    (docs/methods.md#turn-based-length-penalty)."""
    length_threshold: int = 10
    """L_thr of the length penalty, in turns (T_max is max_turns)."""
    overlong_buffer: int = 0
    """L_cache of DAPO's soft overlong punishment (docs/methods.md#overlong-shaping), in tokens:
    an episode of more than max_context_tokens - overlong_buffer tokens (prompts, replies and
    observations) has a penalty added to its reward, falling linearly to -1 at
    max_context_tokens. 0: off (Nebius keeps overlong episodes unpenalised)."""
    overlong_filter: bool = False
    """Drop episodes cut by a limit (max turns, context, completion length) from the loss."""
    reward_fn: str | None = None
    """'module:function' computing the reward from a Trajectory (default: the env's reward)."""
    old_logprobs: str = "auto"
    """Log-probs of the importance ratio's denominator: behaviour (the rollout engine's, as it
    sampled), recompute (the learner's before the first step: the proximal policy), auto
    (behaviour when the engine shares the policy module and no off-policy correction is on).
    behaviour with a correction is refused for clipped losses."""
    loss: str = "grpo"
    """Policy loss name in algos.objectives's registry."""
    agg_mode: str = "seq-mean-token-mean"
    """Loss aggregation: token-mean (sum over policy tokens / tokens in the whole batch, DAPO),
    seq-mean-token-mean (mean over each sequence's tokens, then over sequences: the GRPO paper)
    or seq-mean-token-sum."""
    kl_coef: float = 0.04
    """beta, the weight of the KL(pi || pi_ref) penalty against a frozen copy of the initial
    policy (GRPO needs > 0; modified DAPO uses none)."""
    kl_estimator: str = "k3"
    """k1, k2 or k3 (docs/methods.md#kl-estimators)."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (entropy is always logged)."""
    solve_rates: str | None = None
    """A solve_rates.json from an earlier run: keep only tasks with 0 < rate < 2/3 (stage 2)."""
    eps_low: float | None = None
    """Lower clip range: ratio >= 1 - eps_low. None: the algorithm's (DAPO 0.2; GRPO clip_eps,
    0.2), or the loss's own where it has one (gspo: 3e-4, for its sequence-level ratio)."""
    branch_at: str = "none"
    """Branched groups (docs/methods.md#branched-groups): none (plain groups of group_size
    independent episodes), turn:K, fraction:F (of max_turns) or sample (uniform over [1,
    max_turns - 1] per group, from the run's seed): each group is one trunk episode played K turns,
    its env forked into group_size branches that go on independently. A trunk that ends before
    K falls back to a plain group (counted as branch_fallbacks). Built-in agent, threads, an env
    that can fork (the SWE envs). Default none: branching changes what a group's baseline
    compares (continuations of one state, not whole attempts), so it is opted into."""
    prefix_credit: str = "none"
    """The credit of a branched group's shared trunk: none (its policy tokens are out of every
    branch's loss) or mean (trained once, with the group's mean advantage: about 0 with
    mean-centred advantages, but in the KL, entropy and token counts)."""
    eps_high: float | None = None
    """Upper clip range (clip-higher when above eps_low): ratio <= 1 + eps_high. None: the
    algorithm's (DAPO 0.3; GRPO clip_eps, 0.2), or the loss's own (gspo: 4e-4)."""

    # (eps_low, eps_high) where the user sets neither and the loss has no range of its own
    CLIP_DEFAULT: ClassVar[tuple[float, float]] = (0.2, 0.2)  # DeepSeekMath's GRPO

    def __post_init__(self) -> None:
        super().__post_init__()
        resolve_clip(self)
        try:  # the learner's own fields are checked where they are declared, in LearnerConfig
            self.learner_config()
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(str(e)) from None
        validate_rl_config(self)

    def learner_config(self) -> LearnerConfig:
        """The learner this algorithm trains with: the clip range goes to every loss with a ratio."""
        kwargs = (
            {}
            if self.loss in ("pg", "sft")
            else {"eps_low": self.eps_low, "eps_high": self.eps_high}
        )
        return learner_config_from(self, kwargs)


def resolve_clip(cfg: PolicyGradientConfig) -> None:
    """``eps_low``/``eps_high`` left unset made concrete, each side on its own: the loss's own
    range (``objectives.CLIP_DEFAULTS``) where it has one, else the algorithm's
    ``CLIP_DEFAULT``. A side the user set (flag, preset, file) is kept."""
    low, high = objectives.CLIP_DEFAULTS.get(cfg.loss, cfg.CLIP_DEFAULT)
    if cfg.eps_low is None:
        cfg.eps_low = low
    if cfg.eps_high is None:
        cfg.eps_high = high


def validate_rl_config(cfg: PolicyGradientConfig) -> None:
    """Checks GRPO and DAPO share (called from their ``__post_init__``, before any work)."""
    if cfg.filter not in objectives.FILTERS:
        raise unknown_choice("filter", cfg.filter, objectives.FILTERS)
    if cfg.on_exhausted not in ON_EXHAUSTED:
        raise unknown_choice("on_exhausted", cfg.on_exhausted, ON_EXHAUSTED)
    cfg.old_logprobs = OLD_LOGPROBS_ALIASES.get(cfg.old_logprobs, cfg.old_logprobs)
    if cfg.old_logprobs not in OLD_LOGPROBS:
        raise unknown_choice("old_logprobs", cfg.old_logprobs, OLD_LOGPROBS)
    require_at_least(
        cfg, 1, "iterations", "problems_per_iteration", "group_size", "max_steps_per_iteration"
    )
    check_branching(cfg)
    require_at_least(cfg, 0, "max_refill_rounds")
    if cfg.group_size < 2 and cfg.filter != "none":
        raise ConfigError(
            f"group_size={cfg.group_size}: a group of one has zero advantage, so filter="
            f"{cfg.filter!r} would drop every sample; use group_size >= 2"
        )
    if cfg.length_penalty and cfg.length_threshold >= cfg.max_turns:
        raise ConfigError(
            f"length_penalty needs length_threshold < max_turns (T_max); got length_threshold="
            f"{cfg.length_threshold}, max_turns={cfg.max_turns}"
        )
    if not 0 <= cfg.overlong_buffer <= cfg.max_context_tokens:
        raise ConfigError(
            f"overlong_buffer must be in [0, max_context_tokens={cfg.max_context_tokens}] (0: no "
            f"overlong penalty); got {cfg.overlong_buffer}"
        )
    if cfg.eps_low is None or not 0 <= cfg.eps_low < 1:
        raise ConfigError(f"eps_low must be in [0, 1); got {cfg.eps_low}")
    if cfg.eps_high is None or cfg.eps_high < 0:
        raise ConfigError(f"eps_high must be >= 0; got {cfg.eps_high}")
    if cfg.eps_low > cfg.eps_high:
        raise ConfigError(
            f"eps_low={cfg.eps_low} > eps_high={cfg.eps_high}: the clip range needs "
            "eps_high >= eps_low (Nebius: 0.2/0.3 stage 1, 0.2/0.26 stage 2; GSPO: 3e-4/4e-4)"
        )
    # Refused, not warned: the two settings contradict. 'behaviour' makes the rollout's log-probs
    # the ratio's denominator; a correction makes it the learner's before the step, which
    # 'behaviour' never computes, so the learner takes each step's own forward: every ratio is 1
    # and the clip never acts. pg has no clip, and its weight pi / pi_behaviour is then exact.
    if (
        cfg.old_logprobs == "behaviour"
        and cfg.off_policy_correction != "none"
        and cfg.loss in objectives.NEEDS_OLD_LOGPROBS
    ):
        raise ConfigError(
            f"old_logprobs='behaviour' with off_policy_correction={cfg.off_policy_correction!r} "
            f"would switch off the clip of loss {cfg.loss!r}: a correction takes the ratio's "
            "denominator from the learner's log-probs before the step, which 'behaviour' does "
            "not compute, so every ratio would be 1; with a correction use old_logprobs=recompute or "
            "auto, or keep old_logprobs=behaviour with off_policy_correction=none (or loss pg)"
        )


def learner_config_from(cfg: PolicyGradientConfig, loss_kwargs: dict[str, Any]) -> LearnerConfig:
    """The LearnerConfig an RL config implies (constant lr after warm-up,
    docs/methods.md#modified-dapo)."""
    return LearnerConfig(
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        grad_clip=cfg.grad_clip,
        warmup_steps=cfg.warmup_steps,
        schedule="constant",
        micro_batch_tokens=cfg.micro_batch_tokens,
        bf16=cfg.bf16,
        grad_checkpointing=cfg.grad_checkpointing,
        loss=cfg.loss,
        loss_kwargs=loss_kwargs,
        agg_mode=cfg.agg_mode,
        kl_coef=cfg.kl_coef,
        kl_estimator=cfg.kl_estimator,
        entropy_coef=cfg.entropy_coef,
        log_entropy=True,
        temperature=cfg.temperature,
        off_policy_correction=getattr(cfg, "off_policy_correction", "none"),
        is_cap=getattr(cfg, "is_cap", 2.0),
        tree_packing=getattr(cfg, "tree_packing", True),
        **cfg.learner,
    )


def resolve_old_logprobs(cfg: PolicyGradientConfig, on_policy: bool, shares_weights: bool) -> str:
    """``old_logprobs`` made concrete: ``auto`` takes the behaviour log-probs only when the
    rollout engine is the training module itself and no off-policy correction is asked for (a
    correction needs the learner's log-probs next to the behaviour policy's), else ``recompute``."""
    mode = cfg.old_logprobs
    if mode == "auto":
        correct = getattr(cfg, "off_policy_correction", "none") != "none"
        mode = "behaviour" if on_policy and shares_weights and not correct else "recompute"
    if mode == "behaviour" and not on_policy:
        raise ConfigError(
            f"old_logprobs='behaviour' needs on-policy rollouts; rollout_model="
            f"{cfg.rollout_model!r} is another model: use old_logprobs=recompute"
        )
    return mode
