"""The run-level config dataclasses: ``RunConfig`` (every run) and ``RLConfig`` (GRPO and DAPO)."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from algos.config import ConfigError, require_at_least
from algos.config.checks import (
    check_agent_cmd,
    check_learner_settings,
    check_policy,
    load_agent_factory,
)
from swe_gym.errors import unknown_choice

LOGGERS = ("jsonl", "tensorboard", "wandb")
ENGINES = ("transformers", "vllm")
DTYPES = ("float32", "bfloat16")
ROLLOUT_BACKENDS = ("threads", "ray")
EPISODE_SAMPLING = ("groups", "random")


@dataclass
class RunConfig:
    """What a run is made of: env, policy, sampling engine, logging, checkpoints."""

    run_dir: str | None = None
    """Output folder (metrics.jsonl, checkpoints, config.yaml); default runs/<algo>-<time>."""
    seed: int = 0
    """Seeds torch, the task pool and the episodes."""
    env: str = "SWEStarter-v0"
    """Registered env id (multi-turn SWEStarter-v0, single-turn SWERL-v0, ToyKeyword-v0, ...)."""
    env_kwargs: dict = field(default_factory=dict)
    """Extra gym.make keyword arguments (JSON on the command line)."""
    tasks: list[str] | None = None
    """Task ids forming the training pool (default: every task of the env)."""
    policy: str = "smollm2"
    """The model trained: 'smollm2' (bundled SmolLM2-135M-Instruct), 'tiny-random' (a tiny random
    Llama with SmolLM2's tokenizer, for tests) or a Hugging Face model folder."""
    engine: str = "transformers"
    """Rollout engine sampling from the policy: 'transformers' (shares the module when
    engine_dtype is float32, else a copy updated every iteration) or 'vllm' (in-process)."""
    engine_dtype: str = "float32"
    """Weights dtype of the rollout engine: float32 or bfloat16."""
    engine_gpu_memory: float = 0.4
    """vLLM on a GPU: the share of the device's memory the engine takes for weights and KV cache.
    The in-process engine shares the GPU with the learner, so vLLM's own default (0.9) would leave
    the learner too little; raise it when the learner is small or runs elsewhere."""
    rollout_model: str = "policy"
    """'policy' samples on-policy from the engine; any agents.load_model spec (oracle,
    scripted:FILE) rolls out with that model instead (off-policy: old log-probs are recomputed)."""
    agent: str | None = None
    """Your own agent program, as module:factory (e.g. examples.openai_agent:make_agent): each
    episode runs it against the env through an OpenAI-compatible gateway in front of the sampler
    (the policy's engine, or rollout_model), which records the token-exact trajectory the learner
    trains on (algos.rollout.agent_programs). None: the built-in ReAct agent."""
    agent_cmd: str | None = None
    """A harness to train, as a command line run by bash in each episode's sandbox (cwd
    /testbed, no network): it reaches the policy at $OPENAI_BASE_URL with $OPENAI_API_KEY and
    $OPENAI_MODEL, reads the issue from $SWE_GYM_ISSUE_FILE, and its exit submits the working
    copy (algos.rollout.agent_cmd). Multi-turn SWE envs only."""
    agent_mount: str | None = None
    """A folder holding agent_cmd's harness (a script, a Python environment, tools), bound
    read-only at /opt/harness in every sandbox, its bin/ first on PATH."""
    concurrency: int = 4
    """Episodes run at once."""
    max_turns: int = 40
    """Agent turns per episode (also the env's turn limit for multi-turn envs)."""
    max_new_tokens: int = 1024
    """Tokens sampled per turn."""
    max_context_tokens: int = 65536
    """Prompt + completion budget of an episode; longer trajectories are truncated for the
    learner (counted as 'truncated')."""
    temperature: float = 1.0
    """Sampling temperature (top-k/top-p stay off: docs/methods.md#react-scaffold)."""
    max_consecutive_invalid: int | None = 5
    """Invalid actions in a row before the agent gives up (none: no cap)."""
    episode_timeout_s: float | None = None
    """Wall-clock limit of one episode (none: no limit)."""
    max_error_share: float = 0.5
    """Stop the run (first error's message, non-zero exit) when more than this share of an
    iteration's episodes fail in their rollout or reward; a run where every one fails always
    stops."""
    learner: dict = field(default_factory=dict)
    """LearnerConfig settings no field here names, set directly, e.g. {"liger": true,
    "logprob_chunk_size": 2048}: betas, eps (AdamW), packing, packed_attention, tree_min_prefix,
    bf16_compute_copy, liger, logprob_chunk_size, min_lr_ratio (see
    algos/learner/learner_config.py). Fixed by the algorithm: schedule (RL constant, RFT cosine),
    total_steps (derived), loss_kwargs (the clip range), log_entropy (on); RFT's loss choices
    (sft, token-mean, no KL, entropy term or correction)."""
    batch_size: int = 512
    """Trajectories per optimiser step (RL: also the fewest samples an iteration needs after
    filtering; GRPO: a multiple of group_size, whole groups per step)."""
    lr: float = 1e-6
    """Peak AdamW learning rate (RL: constant after warm-up; RFT: cosine to 0)."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    warmup_steps: int = 0
    """Linear warm-up steps."""
    grad_clip: float = 1.0
    """Max gradient norm."""
    mask_invalid: bool = False
    """Mask turns whose action the env rejected (format errors) out of the loss."""
    yarn_factor: float | None = None
    """Extend the rope with YaRN by this factor (DAPO stage 2: 4)."""
    tree_packing: bool = True
    """Shared-prefix packing in the learner: a group's common prompt (found from the token ids)
    computed once, each episode's continuation attending to it (algos.learner.tree); same loss
    and gradients as plain packing. The metrics rows show tokens_computed against tokens_plain."""
    save_episodes: int | None = 64
    """Episodes written to RUN_DIR/episodes/ per iteration (token-exact Trajectory JSONL; RFT's
    rollouts are iteration 1; python -m algos.report RUN_DIR shows them); 0 saves none, none
    saves all."""
    save_episodes_sampling: str = "groups"
    """Which episodes are saved when there are more than save_episodes: groups (whole groups at
    random, so a task's episodes stay together) or random (episodes at random)."""
    micro_batch_tokens: int = 8192
    """Token budget of one forward/backward micro-batch."""
    bf16: bool = False
    """bfloat16 autocast in the learner (fast on CPUs with AMX/AVX512-BF16 and on GPUs)."""
    grad_checkpointing: bool = False
    """Activation checkpointing in the learner."""
    log: list[str] = field(default_factory=lambda: ["jsonl"])
    """Metric sinks: jsonl (always on), tensorboard, wandb (used when installed)."""
    wandb_project: str = "swe-gym-rl"
    """Weights & Biases project when 'wandb' is in log."""
    checkpoint_every: int = 1
    """Save a checkpoint every N iterations/steps (0: only at the end and on Ctrl-C)."""
    progress: bool = True
    """Show a tqdm progress bar with ETA."""
    verbose: bool = False
    """Show the inference engine's (vLLM's) log lines on the terminal too; they always go to
    RUN_DIR/engine.log, and the terminal otherwise shows the progress bar and the table."""
    resume: bool = False
    """Continue from run_dir's latest checkpoint (set by --resume RUN_DIR)."""
    cp: int = 1
    """Context-parallel size under torchrun: each sequence is split over this many ranks (ring
    attention); the world size must be divisible by it (data-parallel size = world // cp)."""
    rollout_backend: str = "threads"
    """Where episodes run: 'threads' (in the training process, concurrency at once) or 'ray'
    (RolloutWorker actors on a Ray cluster, sandboxes spread over its nodes, one shared engine)."""
    ray_address: str | None = None
    """Ray cluster to join with rollout_backend=ray ('auto': the local node's cluster started
    with `ray start`); none starts a private local Ray instance."""
    ray_workers: int = 2
    """Rollout worker actors with rollout_backend=ray (each runs `concurrency` episodes)."""
    max_sandbox_starts_per_node: int = 8
    """Sandbox starts at once per Ray node (rollout_backend=ray), so a burst of resets cannot
    overload one Docker daemon."""
    hack_action: str = "mask"
    """The reward-hack monitor's policy for a rewarded episode with a hack signal
    (algos/rollout/hack_monitor.py): 'mask' (no gradient), 'penalise' (reward hack_penalty;
    RFT drops it as mask does) or 'log' (counted only)."""
    hack_policy: dict = field(default_factory=dict)
    """Per-signal overrides of hack_action, e.g. {"issue_literal": "log"} (signals:
    swe_gym.audit.signals.SIGNALS)."""
    hack_penalty: float = -1.0
    """The reward of a penalised episode."""
    hackable_weight: float = 1.0
    """How often tasks the audit flags (python -m swe_gym.audit) are drawn, relative to the
    others: 1 keeps them as they are, 0 excludes them, between samples them less."""
    audit_file: str | None = None
    """The audit that hackable_weight reads (default: the one beside the env's rows, or the
    bundled suite's own)."""

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise unknown_choice("engine", self.engine, ENGINES)
        if self.engine_dtype not in DTYPES:
            raise unknown_choice("engine_dtype", self.engine_dtype, DTYPES)
        self.log = list(self.log)
        for name in self.log:
            if name not in LOGGERS:
                raise unknown_choice("log sink", name, LOGGERS)
        if "jsonl" not in self.log:
            self.log.insert(0, "jsonl")
        require_at_least(
            self,
            1,
            "concurrency",
            "max_turns",
            "max_new_tokens",
            "max_context_tokens",
            "micro_batch_tokens",
            "batch_size",
        )
        if self.max_new_tokens >= self.max_context_tokens:
            raise ConfigError(
                f"max_new_tokens={self.max_new_tokens} does not fit max_context_tokens="
                f"{self.max_context_tokens}: the context must hold the prompt and a completion; "
                "raise max_context_tokens or lower max_new_tokens"
            )
        if not 0 < self.engine_gpu_memory <= 1:
            raise ConfigError(f"engine_gpu_memory must be in (0, 1]; got {self.engine_gpu_memory}")
        if not 0 <= self.max_error_share <= 1:
            raise ConfigError(f"max_error_share must be in [0, 1]; got {self.max_error_share}")
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0 for RL sampling; got {self.temperature}")
        require_at_least(self, 0, "checkpoint_every")
        require_at_least(self, 1, "cp")
        if self.save_episodes is not None and self.save_episodes < 0:
            raise ConfigError(f"save_episodes must be >= 0 or none (all); got {self.save_episodes}")
        if self.save_episodes_sampling not in EPISODE_SAMPLING:
            raise unknown_choice(
                "save_episodes_sampling", self.save_episodes_sampling, EPISODE_SAMPLING
            )
        check_policy(self.hack_policy, self.hack_action)
        check_learner_settings(self.learner)
        if not 0 <= self.hackable_weight <= 1:
            raise ConfigError(f"hackable_weight must be in [0, 1]; got {self.hackable_weight}")
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world % self.cp:
            raise ConfigError(
                f"cp={self.cp} does not divide the world size {world} (WORLD_SIZE from torchrun); "
                f"choose a cp among {[d for d in range(1, world + 1) if world % d == 0]}"
            )
        if self.rollout_backend not in ROLLOUT_BACKENDS:
            raise unknown_choice("rollout_backend", self.rollout_backend, ROLLOUT_BACKENDS)
        if self.agent is not None:
            if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", self.agent):
                raise ConfigError(
                    f"agent must be module:factory (e.g. examples.openai_agent:make_agent); "
                    f"got {self.agent!r}"
                )
            if self.rollout_backend != "threads":
                raise ConfigError(
                    f"agent={self.agent!r} runs with rollout_backend=threads only; got "
                    f"rollout_backend={self.rollout_backend!r}"
                )
            load_agent_factory(self.agent)  # a bad module fails now, not after the model loads
        if self.agent_cmd is not None or self.agent_mount is not None:
            check_agent_cmd(self)
        require_at_least(self, 1, "ray_workers", "max_sandbox_starts_per_node")
        if self.resume and not self.run_dir:
            raise ConfigError("resume needs run_dir: use --resume RUN_DIR")

    def resolve_run_dir(self, algo: str) -> Path:
        """``run_dir``, defaulting to ``runs/<algo>-<time>``; stored back into the config."""
        if not self.run_dir:
            self.run_dir = f"runs/{algo}-{time.strftime('%Y%m%d-%H%M%S')}"
        return Path(self.run_dir)


@dataclass
class RLConfig(RunConfig):
    """Run-level fields plus the RL loop's objective choices and saved episodes (GRPO, DAPO)."""

    advantage_estimator: str = "grpo"
    """grpo (group mean, divided by the group std when normalize_std) or rloo (leave-one-out
    mean of the other group members, no std)."""
    mask_failed_groups: bool = False
    """Instance-level failure masking: a group in which any episode ended by a rollout error, a
    timeout, a dead sandbox (sandbox_failed), no grading verdict (grading_error) or a failing
    reward function is left out of the loss (counted as failure_masked), instead of scoring
    those episodes 0 or dropping only them."""
    off_policy_correction: str = "none"
    """Sampler/learner mismatch correction: none, tis (truncated importance sampling:
    min(exp(learner - behaviour), is_cap) times the per-token loss) or decoupled (decoupled PPO:
    clip around the learner's log-probs, the behaviour weight, tokens above is_cap dropped).
    With old_logprobs=auto the learner's log-probs are recomputed before the first step."""
    is_cap: float = 2.0
    """C, the importance-weight cap of off_policy_correction."""
    val_runs: int = 0
    """Validation (algos.loop.validation): episodes per task on val_tasks, before training, after the
    last iteration and every val_every iterations, with the same episode seeds each time; pass@1
    and its gain over the first validation, with standard errors over tasks, go to
    RUN_DIR/validation.jsonl, the metrics and the table. 0: no validation."""
    val_every: int = 0
    """Iterations between validations (0: before training and after the last iteration only)."""
    val_tasks: list[str] | None = None
    """Task ids validated on (default: the training pool)."""
    max_staleness: int = 0
    """Asynchronous RL: 0 is the synchronous loop (roll out, then train); K >= 1 keeps a
    background producer rolling out from the latest pushed weights while the learner trains, and
    drops (counts as dropped_stale) every group whose oldest turn is more than K optimiser steps
    behind the learner. Needs an engine with its own copy of the weights."""

    def __post_init__(self) -> None:
        super().__post_init__()
        from algos.objectives import ADVANTAGE_ESTIMATORS

        # off_policy_correction and is_cap are the learner's: LearnerConfig checks them, built
        # when PolicyGradientConfig is
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise unknown_choice(
                "advantage_estimator", self.advantage_estimator, ADVANTAGE_ESTIMATORS
            )
        require_at_least(self, 0, "val_runs", "val_every")
        if self.max_staleness < 0:
            raise ConfigError(
                f"max_staleness must be >= 0 (0: synchronous, K >= 1: samples at "
                f"most K policy versions old); got {self.max_staleness}"
            )
