"""Evaluate a model on an env: ``python -m agents.evaluate --env SWEStarter-v0 --model oracle``.

Runs ``--runs K`` episodes per task (``agents.rollout``), prints a per-task table, pass@1 as the
mean over runs with its standard error (the Nebius work reports Pass@1 as the mean over 10 runs,
docs/methods.md#validation), and pass@k with the unbiased estimator ``1 - C(n-c, k) / C(n, k)``
averaged over tasks.
Writes ``trajectories.jsonl``, SWE-bench ``predictions.jsonl`` (run 0; ``predictions_run<j>.jsonl``
for the others) and ``summary.json`` to ``--out``.

Budget: a model that runs on this machine (``smollm2``, ``hf:``, ``vllm:``) defaults to
``LOCAL_MAX_TURNS`` turns of at most ``LOCAL_MAX_NEW_TOKENS`` tokens, so the README's command
ends in minutes on a laptop CPU (raise them with ``--max-turns``/``--max-new-tokens``); other
models keep the env's turn limit and 1,024 tokens. Before the episodes start one turn is timed
and the worst case printed; the progress bar counts turns.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.models import SPEC_FORMS, load_model
from agents.protocols import Conversation, Generation, SamplingParams
from agents.rollout import rollout
from agents.trajectory import FAILURES, Trajectory, write_predictions

LOCAL_MAX_TURNS = 4
LOCAL_MAX_NEW_TOKENS = 128
API_MAX_NEW_TOKENS = 1024
TASK_FILE_SUFFIXES = (".jsonl", ".json", ".parquet")


def is_local_model(spec: str) -> bool:
    """Whether ``spec`` samples on this machine (slow on a CPU: gets the small budget)."""
    return spec == "smollm2" or spec.startswith(("hf:", "vllm:"))


class TurnCounter:
    """Wraps a model to count turns and sampled tokens (thread-safe) for a per-turn progress
    bar; every other attribute is the model's."""

    def __init__(self, model: Any, on_turn: Any = None):
        self._model = model
        self._lock = threading.Lock()
        self._on_turn = on_turn
        self.turns = 0
        self.tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def generate(self, conversation: Conversation, params: SamplingParams) -> Generation:
        gen = self._model.generate(conversation, params)
        with self._lock:
            self.turns += 1
            self.tokens += len(gen.token_ids)
            if self._on_turn is not None:
                self._on_turn(self)
        return gen


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct: ``1 - C(n-c, k) / C(n, k)``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _ks(runs: int) -> list[int]:
    ks = {k for k in (1, 2, 4, 8, 16, 32, 64) if k <= runs} | {runs}
    return sorted(ks)


def format_valid_rate(trajectories: Sequence[Trajectory]) -> float | None:
    """The share of replies the env could parse as one action (the format a policy must learn);
    None when there was no turn."""
    turns = [t for traj in trajectories for t in traj.turns]
    return sum(not t.invalid_action for t in turns) / len(turns) if turns else None


def summarise(trajectories: Sequence[Trajectory], task_ids: Sequence[str], runs: int) -> dict:
    """Per-task counts, pass@1 mean +- standard error over runs, pass@k.

    ``trajectories`` are task-major: ``runs`` consecutive episodes per task, as ``rollout``
    returns them.
    """
    if len(trajectories) != len(task_ids) * runs:
        raise ValueError(
            f"expected {len(task_ids)} tasks x {runs} runs = {len(task_ids) * runs} "
            f"trajectories, got {len(trajectories)}"
        )
    per_task: dict[str, dict[str, Any]] = {}
    by_run = [[0.0] * len(task_ids) for _ in range(runs)]
    for i, tid in enumerate(task_ids):
        group = trajectories[i * runs : (i + 1) * runs]
        solved = [bool(t.resolved) for t in group]
        for j, ok in enumerate(solved):
            by_run[j][i] = float(ok)
        reasons: dict[str, int] = {}
        for t in group:
            reasons[t.finish_reason] = reasons.get(t.finish_reason, 0) + 1
        per_task[tid] = {
            "n": runs,
            "resolved": sum(solved),
            "mean_turns": statistics.fmean(t.num_turns for t in group),
            "finish_reasons": reasons,
        }
    rates = [statistics.fmean(r) for r in by_run] if task_ids else [0.0] * runs
    stderr = statistics.stdev(rates) / math.sqrt(runs) if runs > 1 else 0.0
    pass_k = {
        k: statistics.fmean(pass_at_k(runs, p["resolved"], k) for p in per_task.values())
        if per_task
        else 0.0
        for k in _ks(runs)
    }
    turns = [t for traj in trajectories for t in traj.turns]
    exact = [traj for traj in trajectories if traj.token_exact]
    return {
        "num_tasks": len(task_ids),
        "runs": runs,
        "format_valid_rate": format_valid_rate(trajectories),
        "turns": len(turns),
        "tokens_per_trajectory": (statistics.fmean(t.num_tokens for t in exact) if exact else None),
        "pass@1": statistics.fmean(rates),
        "pass@1_stderr": stderr,
        "pass@1_per_run": rates,
        "pass@k": {str(k): v for k, v in pass_k.items()},
        "per_task": per_task,
    }


def format_table(summary: dict) -> str:
    rows = [("task", "resolved", "turns", "finish reasons")]
    for tid, p in summary["per_task"].items():
        reasons = ", ".join(f"{k}:{v}" for k, v in sorted(p["finish_reasons"].items()))
        rows.append((tid, f"{p['resolved']}/{p['n']}", f"{p['mean_turns']:.1f}", reasons))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(
        f"pass@1 = {100 * summary['pass@1']:.1f}% +- {100 * summary['pass@1_stderr']:.1f} "
        f"(mean +- s.e. over {summary['runs']} run(s), {summary['num_tasks']} task(s))"
    )
    if summary["runs"] > 1:
        ks = summary["pass@k"].items()
        lines.append("  ".join(f"pass@{k} = {100 * v:.1f}%" for k, v in ks))
    return "\n".join(lines)


def _env_task_ids(
    env_id: str, env_kwargs: dict[str, Any]
) -> tuple[list[str], list[Any], int | None]:
    """``(task ids, tasks, the env's turn limit or None)``."""
    import gymnasium

    import swe_gym  # noqa: F401 - registers the ids

    if env_id not in gymnasium.registry:
        from swe_gym.errors import unknown_choice

        raise unknown_choice("env id", env_id, [k for k in gymnasium.registry if "SWE" in k])
    env = gymnasium.make(env_id, **env_kwargs)
    base: Any = env.unwrapped  # a task env (SWEEnv, SWERLEnv): its .tasks
    try:
        tasks = list(base.tasks)
        turns = getattr(env.unwrapped, "max_turns", None)
    finally:
        env.close()
    return [t.instance_id for t in tasks], tasks, turns


def split_tasks_arg(values: Sequence[str] | None) -> tuple[str | None, list[str]]:
    """``--tasks`` values -> ``(task file or None, task ids)``: a value ending in .jsonl, .json
    or .parquet is a task file (passed to ``gym.make(..., tasks=PATH)``), the others are ids."""
    files = [v for v in values or [] if v.lower().endswith(TASK_FILE_SUFFIXES)]
    ids = [v for v in values or [] if v not in files]
    if len(files) > 1:
        raise SystemExit(f"--tasks takes one task file, got {files}")
    if files and not Path(files[0]).is_file():
        raise SystemExit(
            f"task file {files[0]!r} does not exist (--tasks takes a "
            f"{'/'.join(TASK_FILE_SUFFIXES)} file or task ids)"
        )
    return (files[0] if files else None), ids


def time_one_turn(
    model: Any, env_id: str, env_kwargs: dict[str, Any], task_id: str, max_new_tokens: int
) -> float | None:
    """Seconds one turn of ``max_new_tokens`` takes on the first task's prompt (a turn of 32
    tokens after a warm-up one, scaled); None when the model has no tokenizer (an API, a
    script)."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        return None
    import gymnasium

    from agents.chat import ChatTemplate

    env = gymnasium.make(env_id, **env_kwargs)
    try:
        obs, info = env.reset(seed=0, options={"task_id": task_id})
    finally:
        env.close()
    messages = (
        [{"role": "system", "content": info["system_prompt"]}] if info.get("system_prompt") else []
    ) + [{"role": "user", "content": obs}]
    conv = Conversation(
        messages=messages,
        token_ids=ChatTemplate(tokenizer).initial_ids(messages),
        metadata={"task_id": task_id, "turn": 0},
    )
    n = min(32, max_new_tokens)
    model.generate(conv, SamplingParams(max_new_tokens=1, seed=0))  # warm-up (vLLM compiles)
    t0 = time.perf_counter()
    model.generate(conv, SamplingParams(max_new_tokens=n, seed=0))
    return (time.perf_counter() - t0) * max_new_tokens / n


def print_budget(
    episodes: int,
    turns: int | None,
    max_new_tokens: int,
    concurrency: int,
    turn_s: float | None,
    file: Any = None,
) -> None:
    """The run's caps and, when a turn was timed, its worst case: every episode uses every turn
    and every token, ``concurrency`` episodes sharing the model as if batching were free (so it
    can take longer; episodes that submit early make it shorter)."""
    file = file or sys.stderr
    turns_text = f"<= {turns} turns" if turns else "the env's turn limit"
    print(
        f"budget: {episodes} episodes x {turns_text} x <= {max_new_tokens} new tokens per turn "
        "(--runs, --max-turns, --max-new-tokens)",
        file=file,
    )
    if turn_s is not None and turns:
        worst = math.ceil(episodes / concurrency) * turns * turn_s
        print(
            f"one turn of {max_new_tokens} tokens takes ~{turn_s:.1f} s here; expected at most "
            f"~{worst / 60:.1f} min ({concurrency} episodes at once)",
            file=file,
        )


def evaluate(
    env_id: str,
    model: Any,
    task_ids: Sequence[str],
    runs: int = 1,
    *,
    env_kwargs: dict[str, Any] | None = None,
    agent_kwargs: dict[str, Any] | None = None,
    concurrency: int = 4,
    episode_timeout_s: float | None = None,
    seed: int = 0,
    progress_bar: bool = True,
    max_turns: int | None = None,
) -> tuple[list[Trajectory], dict]:
    """Run the episodes and summarise them (see the module docstring). With ``max_turns`` the
    progress bar counts turns (its total shrinks as episodes end early), else episodes."""
    episodes = len(task_ids) * runs
    bar = None
    if progress_bar:
        from tqdm import tqdm

        total, unit = (episodes * max_turns, "turn") if max_turns else (episodes, "ep")
        bar = tqdm(
            total=total,
            desc="turns" if max_turns else "episodes",
            unit=unit,
            file=sys.stderr,
            dynamic_ncols=True,
        )
    solved = finished = 0
    counter = None

    def postfix() -> None:
        if bar is not None:
            tokens = f", tokens {counter.tokens}" if counter is not None else ""
            bar.set_postfix_str(f"episodes {finished}/{episodes}, resolved {solved}{tokens}")

    def on_turn(c: TurnCounter) -> None:
        if bar is not None:
            bar.update(1)
            postfix()

    if bar is not None and max_turns:
        model = counter = TurnCounter(model, on_turn)

    def tick(traj: Trajectory) -> None:
        nonlocal solved, finished
        solved += int(traj.resolved)
        finished += 1
        if bar is None:
            return
        if max_turns:  # the turns this episode did not use leave the total
            bar.total -= max(0, max_turns - traj.num_turns)
            bar.refresh()
        else:
            bar.update(1)
        postfix()

    try:
        trajs = rollout(
            env_id,
            model,
            list(task_ids),
            n_per_task=runs,
            concurrency=concurrency,
            agent_kwargs=agent_kwargs,
            episode_timeout_s=episode_timeout_s,
            env_kwargs=env_kwargs,
            seed=seed,
            progress=tick,
        )
    finally:
        if bar is not None:
            bar.close()
    return trajs, summarise(trajs, list(task_ids), runs)


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agents.evaluate", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--env", default="SWEStarter-v0", help="registered env id")
    p.add_argument("--model", default="oracle", help="model spec: " + ", ".join(SPEC_FORMS))
    p.add_argument("--runs", type=int, default=1, help="episodes per task (K)")
    p.add_argument(
        "--tasks",
        nargs="*",
        default=None,
        help="task ids (default: all) and/or one task file (.jsonl, .json, .parquet "
        "in the SWE-bench/SWE-rebench schema) given to the env as tasks=PATH",
    )
    p.add_argument("--out", default=None, help="output folder (default: eval_out/<env>-<time>)")
    p.add_argument("--concurrency", type=int, default=4, help="episodes at once")
    p.add_argument(
        "--max-turns",
        type=int,
        default=None,
        help=f"env turn limit (default: {LOCAL_MAX_TURNS} for smollm2/hf:/vllm: "
        "models, else the env's)",
    )
    p.add_argument("--max-context-tokens", type=int, default=None)
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"tokens per turn (default: {LOCAL_MAX_NEW_TOKENS} for smollm2/hf:/vllm: "
        f"models, else {API_MAX_NEW_TOKENS})",
    )
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--action-format", default=None, help="env action format (fenced, json)")
    p.add_argument("--backend", default=None, help="sandbox backend (local, docker)")
    p.add_argument(
        "--prompt",
        default=None,
        help="env prompt style: full (default) or compact (envs/prompted.py)",
    )
    p.add_argument(
        "--max-observation-chars",
        type=int,
        default=None,
        help="cut each tool result to this many characters (head and tail)",
    )
    p.add_argument("--command-timeout", type=float, default=None)
    p.add_argument("--episode-timeout", type=float, default=None, help="seconds per episode")
    p.add_argument("--max-consecutive-invalid", type=int, default=5)
    p.add_argument(
        "--max-error-share",
        type=float,
        default=0.5,
        help="exit 1 when more than this share of episodes crashed (error, "
        "timeout, sandbox_failed, grading_error); the outputs are written first",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="episode seed of run 0 (run j gets SEED + j); each turn then samples "
        "with a seed from (task, episode seed, turn), so runs differ",
    )
    p.add_argument(
        "--model-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra model constructor argument (VALUE parsed as JSON when it can be)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.runs < 1:
        raise SystemExit(f"--runs must be >= 1, got {args.runs}")
    local = is_local_model(args.model)
    if args.max_turns is None and local:
        args.max_turns = LOCAL_MAX_TURNS
    if args.max_new_tokens is None:
        args.max_new_tokens = LOCAL_MAX_NEW_TOKENS if local else API_MAX_NEW_TOKENS
    task_file, wanted = split_tasks_arg(args.tasks)
    env_kwargs: dict[str, Any] = {}
    for key, value in (
        ("tasks", task_file),
        ("max_turns", args.max_turns),
        ("action_format", args.action_format),
        ("backend", args.backend),
        ("command_timeout", args.command_timeout),
        ("prompt", args.prompt),
        ("max_observation_chars", args.max_observation_chars),
    ):
        if value is not None:
            env_kwargs[key] = value
    all_ids, all_tasks, env_turns = _env_task_ids(args.env, env_kwargs)
    task_ids = wanted or all_ids
    unknown = [t for t in task_ids if t not in set(all_ids)]
    if unknown:
        raise SystemExit(f"unknown task id(s) {unknown[:5]} for {args.env}; it has: {all_ids[:20]}")

    model_kw: dict[str, Any] = {}
    for item in args.model_arg:
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"--model-arg {item!r} must be KEY=VALUE")
        model_kw[key] = _parse_value(value)
    if args.model == "oracle":
        model_kw.setdefault("tasks", all_tasks)
        model_kw.setdefault("action_format", args.action_format or "fenced")
    model = load_model(args.model, **model_kw)

    agent_kwargs = {
        # no fixed sampling seed: one would make every run (and every turn) draw the same
        # sample; the agent derives each turn's seed from the episode's seed instead
        "params": SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens),
        "max_context_tokens": args.max_context_tokens,
        "max_consecutive_invalid": args.max_consecutive_invalid,
    }
    out = Path(args.out or f"eval_out/{args.env}-{time.strftime('%Y%m%d-%H%M%S')}")
    turns = args.max_turns or env_turns
    turn_s = (
        time_one_turn(model, args.env, env_kwargs, task_ids[0], args.max_new_tokens)
        if local
        else None
    )
    print_budget(len(task_ids) * args.runs, turns, args.max_new_tokens, args.concurrency, turn_s)
    t0 = time.perf_counter()
    trajs, summary = evaluate(
        args.env,
        model,
        task_ids,
        args.runs,
        env_kwargs=env_kwargs,
        agent_kwargs=agent_kwargs,
        concurrency=args.concurrency,
        episode_timeout_s=args.episode_timeout,
        seed=args.seed,
        progress_bar=not args.no_progress,
        max_turns=turns,
    )
    summary.update(
        env=args.env, model=getattr(model, "name", args.model), wall_s=time.perf_counter() - t0
    )
    Trajectory.save_jsonl(trajs, out / "trajectories.jsonl")
    for j in range(args.runs):
        name = "predictions.jsonl" if j == 0 else f"predictions_run{j}.jsonl"
        write_predictions(trajs[j :: args.runs], out / name)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(format_table(summary))
    print(
        f"wrote {out}/trajectories.jsonl, predictions.jsonl, summary.json "
        f"({summary['wall_s']:.0f} s)"
    )
    failed = [t for t in trajs if t.finish_reason in FAILURES]
    if trajs and len(failed) > args.max_error_share * len(trajs):
        # a crashed episode is not the model's failure: pass@1 over them would be wrong
        first = (failed[0].error or failed[0].finish_reason).strip().splitlines()[-1]
        print(
            f"error: {len(failed)} of {len(trajs)} episodes failed (more than "
            f"--max-error-share {args.max_error_share}); the first: {first}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
