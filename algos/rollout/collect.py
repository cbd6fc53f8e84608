"""What runs episodes: the task pool, rollouts, and one iteration's groups (scored, refilled)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Union, runtime_checkable

from agents.trajectory import Trajectory
from algos.config import ConfigError
from algos.config.checks import env_accepts
from algos.config.run import RunConfig
from algos.learner.samples import Sample
from algos.rollout.scoring import Counters, Scored, ScoringSpec, score_groups, to_samples

if TYPE_CHECKING:
    from agents.protocols import Model
    from algos.config.policy_gradient import PolicyGradientConfig

log = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------------
# The task pool (its tasks: task_source.py)
# ------------------------------------------------------------------------------------------


class TaskPool:
    """Shuffled passes over the pool (a fresh permutation per epoch, from ``seed``). A task with
    a weight ``w`` in ``weights`` is in each pass with probability ``w``, so it is drawn ``w``
    times as often as the others."""

    def __init__(self, pool: Sequence[str], seed: int = 0, weights: dict[str, float] | None = None):
        if not pool:
            raise ConfigError("the task pool is empty; check tasks= and the env's task source")
        self.pool = list(pool)
        self.seed = seed
        # task -> chance (0..1] of being in an epoch's pass (hackable_weight); others always are
        self.weights = dict(weights or {})
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[str]:
        rng = random.Random(self.seed * 1_000_003 + epoch)
        order = [t for t in self.pool if t not in self.weights or rng.random() < self.weights[t]]
        rng.shuffle(order)
        return order or list(self.pool)

    def sample(self, n: int) -> list[str]:
        out = []
        for _ in range(n):
            if self.position >= len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._permutation(self.epoch)
            out.append(self._order[self.position])
            self.position += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "pool": self.pool}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["pool"]) != self.pool:
            log.warning("task pool changed since the checkpoint; restarting the pool's epoch")
            return
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)


# ------------------------------------------------------------------------------------------
# Running episodes
# ------------------------------------------------------------------------------------------


def agent_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """The ``ReActAgent`` keyword arguments a run config implies."""
    from agents.protocols import SamplingParams

    # No fixed seed: the agent derives one per turn from the episode's seed (each episode of a
    # group has its own), so groups sample independently of the rollout's thread order.
    params = SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens)
    return {
        "params": params,
        "max_turns": cfg.max_turns,
        "max_context_tokens": cfg.max_context_tokens,
        "max_consecutive_invalid": cfg.max_consecutive_invalid,
    }


def env_kwargs_for(cfg: RunConfig) -> dict[str, Any]:
    """``gym.make`` keyword arguments: ``env_kwargs`` plus ``max_turns`` when the env takes it."""
    kw = dict(cfg.env_kwargs)
    if env_accepts(cfg.env, "max_turns"):
        kw.setdefault("max_turns", cfg.max_turns)
    return kw


@dataclass(frozen=True)
class RolloutSpec:
    """Where and how episodes run: the env, the agent's settings, concurrency and timeout."""

    env: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    agent_kwargs: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 1
    episode_timeout_s: float | None = None
    agent: str | None = (
        None  # module:factory of a user's agent program (algos.rollout.agent_programs)
    )
    agent_cmd: str | None = None  # a harness command run in the sandbox (algos.rollout.agent_cmd)
    agent_mount: str | None = None  # the harness's folder, /opt/harness in the sandbox
    branch_at: str = "none"  # branched groups (algos.rollout.branching); none: plain episodes

    @classmethod
    def from_config(cls, cfg: RunConfig) -> RolloutSpec:
        return cls(
            env=cfg.env,
            env_kwargs=env_kwargs_for(cfg),
            agent_kwargs=agent_kwargs(cfg),
            concurrency=cfg.concurrency,
            episode_timeout_s=cfg.episode_timeout_s,
            agent=getattr(cfg, "agent", None),
            agent_cmd=getattr(cfg, "agent_cmd", None),
            agent_mount=getattr(cfg, "agent_mount", None),
            branch_at=getattr(cfg, "branch_at", "none"),
        )


@runtime_checkable
class EpisodeRunner(Protocol):
    """An engine that runs whole episodes itself (``algos.policy.RayRollouts``)."""

    def run_episodes(
        self,
        task_ids: Sequence[str],
        n_per_task: int,
        seed: int,
        progress: Callable[[Trajectory], None] | None = None,
    ) -> list[Trajectory]: ...


@runtime_checkable
class TakesWeights(Protocol):
    """A rollout engine with its own copy of the weights (``TransformersModel``, ``VLLMModel``,
    ``RayRollouts``): the trainer pushes each update as a policy version."""

    def update_weights(self, state: dict[str, Any], version: int | None = None) -> Any: ...


# What samples the rollouts (``Policy.engine``): an ``agents`` model the built-in agent (or the
# gateway, for agent programs) calls turn by turn, or a runner of whole episodes (Ray workers).
RolloutEngine = Union["Model", EpisodeRunner]


def run_rollouts(
    spec: RolloutSpec,
    engine: RolloutEngine,
    task_ids: Sequence[str],
    n_per_task: int,
    seed: int,
    progress: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """``n_per_task`` episodes per task (task-major order) through ``agents.rollout``, or the
    engine's own ``run_episodes`` (an :class:`EpisodeRunner`) with the same jobs and seeds; with
    ``spec.branch_at`` one branched group per task (``algos.rollout.branching``)."""
    from agents.rollout import rollout
    from algos.rollout import branching

    if isinstance(engine, EpisodeRunner):
        branching.refuse_episode_runner(spec)
        return engine.run_episodes(task_ids, n_per_task, seed, progress)
    if spec.branch_at != "none" and not (spec.agent_cmd or spec.agent):
        return branching.run_branched_rollouts(spec, engine, task_ids, n_per_task, seed, progress)
    if spec.agent_cmd:
        from algos.rollout.agent_cmd import run_cmd_rollouts

        return run_cmd_rollouts(spec, engine, task_ids, n_per_task, seed, progress)
    if spec.agent:
        from algos.rollout.agent_programs import run_agent_rollouts

        return run_agent_rollouts(spec, engine, task_ids, n_per_task, seed, progress)
    return rollout(
        spec.env,
        engine,
        list(task_ids),
        n_per_task=n_per_task,
        concurrency=spec.concurrency,
        agent_kwargs=spec.agent_kwargs,
        episode_timeout_s=spec.episode_timeout_s,
        env_kwargs=spec.env_kwargs,
        seed=seed,
        progress=progress,
    )


def check_prompt_fits(spec: RolloutSpec, tokenizer: Any, task_id: str, seed: int) -> int:
    """Tokens of the first prompt of ``task_id``; a clear error if the context cannot hold it
    plus one completion (checked once, before any rollout)."""
    import gymnasium

    from agents.chat import ChatTemplate

    env = gymnasium.make(spec.env, **spec.env_kwargs)
    try:
        obs, info = env.reset(seed=seed, options={"task_id": task_id})
    finally:
        env.close()
    messages = (
        [{"role": "system", "content": info["system_prompt"]}] if info.get("system_prompt") else []
    ) + [{"role": "user", "content": obs}]
    n = len(ChatTemplate(tokenizer).initial_ids(messages))
    limit = spec.agent_kwargs["max_context_tokens"]
    if n + 1 > limit:
        raise ConfigError(
            f"the prompt of task {task_id!r} is {n} tokens but max_context_tokens={limit} leaves "
            "no room to generate; raise max_context_tokens to at least "
            f"{n + spec.agent_kwargs['params'].max_new_tokens}"
        )
    return n


# ------------------------------------------------------------------------------------------
# One iteration's groups: roll out, score, filter, refill
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CollectPlan:
    """How an iteration gathers its groups: problems per round, group size, refills, seeds."""

    problems_per_iteration: int
    group_size: int
    needed: int  # survivors that end the refills
    max_refill_rounds: int = 0
    refill_problems: int | None = None
    seed: int = 0

    @classmethod
    def from_config(cls, cfg: PolicyGradientConfig, needed: int) -> CollectPlan:
        return cls(
            problems_per_iteration=cfg.problems_per_iteration,
            group_size=cfg.group_size,
            needed=needed,
            max_refill_rounds=cfg.max_refill_rounds,
            refill_problems=cfg.refill_problems,
            seed=cfg.seed,
        )

    def round_seed(self, iteration: int, round_: int) -> int:
        """The episode seed of refill round ``round_`` of iteration ``iteration`` (0-based)."""
        return self.seed + 1_000 * (iteration * (self.max_refill_rounds + 1) + round_)


@dataclass
class Collected:
    """An iteration's groups: the filter's survivors, refill rounds, every reward scored, every
    episode rolled out, and the learner's samples of the survivors (none when fewer than the
    plan needs survived: the trainer then stops or skips the iteration)."""

    kept: list[Scored]
    rounds: int
    rewards: list[float]
    episodes: list[Trajectory]
    samples: list[Sample] = field(default_factory=list)

    @classmethod
    def finish(
        cls,
        kept: list[Scored],
        rounds: int,
        rewards: list[float],
        episodes: list[Trajectory],
        *,
        needed: int,
        scoring: ScoringSpec,
        counters: Counters,
    ) -> Collected:
        """The collection, with the survivors made samples once enough survived."""
        samples = (
            to_samples(
                kept,
                counters,
                max_tokens=scoring.max_context_tokens,
                mask_invalid=scoring.mask_invalid,
                overlong_filter=scoring.overlong_filter,
                prefix_credit=scoring.prefix_credit,
            )
            if len(kept) >= needed
            else []
        )
        return cls(kept, rounds, rewards, episodes, samples)


def roll_out_groups(
    spec: RolloutSpec,
    engine: RolloutEngine,
    task_ids: Sequence[str],
    group_size: int,
    seed: int,
    group_base: int = 0,
    progress: Callable[[Trajectory], None] | None = None,
) -> tuple[list[Trajectory], list[int]]:
    """``group_size`` episodes per task; returns ``(trajectories, group index of each)`` with
    groups numbered from ``group_base`` (one per task, task-major)."""
    trajs = run_rollouts(spec, engine, task_ids, group_size, seed, progress)
    return trajs, [group_base + i // group_size for i in range(len(trajs))]


def count_solves(solve_counts: dict[str, list[int]], trajs: Sequence[Trajectory]) -> None:
    """``solve_counts[task] = [attempts, resolved]``, updated in place."""
    for t in trajs:
        if t.task_id is None:  # not drawn from the pool (the loops always name the task)
            continue
        a, r = solve_counts.setdefault(t.task_id, [0, 0])
        solve_counts[t.task_id] = [a + 1, r + int(bool(t.resolved))]


def collect(
    plan: CollectPlan,
    scoring: ScoringSpec,
    spec: RolloutSpec,
    tasks: TaskPool,
    engine: RolloutEngine,
    reward_fn: Callable[[Trajectory], float] | None,
    counters: Counters,
    *,
    iteration: int,
    solve_counts: dict[str, list[int]],
    tick: Callable[[Trajectory], None] | None = None,
) -> Collected:
    """Iteration ``iteration`` (0-based): roll out groups of the tasks ``tasks`` hands out with
    ``engine``, score and filter them, and refill while fewer than ``plan.needed`` survive
    (at most ``plan.max_refill_rounds`` extra rounds)."""
    kept: list[Scored] = []
    rewards: list[float] = []
    episodes: list[Trajectory] = []
    rounds = group_base = 0
    n_problems = plan.problems_per_iteration
    while True:
        problems = tasks.sample(n_problems)
        trajs, groups = roll_out_groups(
            spec,
            engine,
            problems,
            plan.group_size,
            plan.round_seed(iteration, rounds),
            group_base,
            tick,
        )
        group_base += len(problems)
        count_solves(solve_counts, trajs)
        scored, survivors = score_groups(
            trajs, groups, scoring, reward_fn, counters, f"iteration {iteration + 1}"
        )
        episodes += trajs
        rewards += [s.reward for s in scored]
        kept += survivors
        if len(kept) >= plan.needed or rounds >= plan.max_refill_rounds:
            break
        rounds += 1
        n_problems = plan.refill_problems or plan.problems_per_iteration
    return Collected.finish(
        kept, rounds, rewards, episodes, needed=plan.needed, scoring=scoring, counters=counters
    )
