"""Evaluate a model on an env: ``python -m agents.evaluate --env SWEStarter-v0 --model oracle``.

Runs ``--runs K`` episodes per task (``agents.rollout``), prints a per-task table, pass@1 as the
mean over runs with its standard error (the Nebius work reports Pass@1 as the mean over 10 runs,
docs/methods.md#validation), and pass@k with the unbiased estimator ``1 - C(n-c, k) / C(n, k)``
averaged over tasks (``agents.eval_metrics``).
Writes ``trajectories.jsonl``, SWE-bench ``predictions.jsonl`` (run 0; ``predictions_run<j>.jsonl``
for the others) and ``summary.json`` to ``--out`` (default ``runs/eval-<env>-<time>``, beside the
trainers' runs); a ``vllm:`` model's own log lines go to ``engine.log`` there (``--verbose``: to the
terminal too).

Budget: a model that runs on this machine (``smollm2``, ``hf:``, ``vllm:``) defaults to
``LOCAL_MAX_TURNS`` turns of at most ``LOCAL_MAX_NEW_TOKENS`` tokens, so the README's command
ends in minutes on a laptop CPU (raise them with ``--max-turns``/``--max-new-tokens``); other
models keep the env's turn limit and 1,024 tokens. Before the episodes start one turn is timed
and the worst case printed (``agents.eval_budget``); the progress bar counts turns.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.eval_budget import (
    API_MAX_NEW_TOKENS,
    LOCAL_MAX_NEW_TOKENS,
    LOCAL_MAX_TURNS,
    is_local_model,
    print_budget,
    time_one_turn,
)
from agents.eval_metrics import format_table, summarise
from agents.models import SPEC_FORMS, load_model
from agents.models.engine_logs import ENGINE_LOG
from agents.protocols import Conversation, Generation, SamplingParams
from agents.rollout import rollout
from agents.trajectory import FAILURES, Trajectory, write_predictions

TASK_FILE_SUFFIXES = (".jsonl", ".json", ".parquet")


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
    p.add_argument("--out", default=None, help="output folder (default: runs/eval-<env>-<time>)")
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
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show a vllm: model's engine log lines on the terminal too (always in OUT/engine.log)",
    )
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
    out = Path(args.out or f"runs/eval-{args.env}-{time.strftime('%Y%m%d-%H%M%S')}")
    if args.model.startswith("vllm:"):  # the terminal keeps the budget, the bar and the table
        model_kw.setdefault("log_file", str(out / ENGINE_LOG))
        model_kw.setdefault("verbose", args.verbose)
    model = load_model(args.model, **model_kw)

    agent_kwargs = {
        # no fixed sampling seed: one would make every run (and every turn) draw the same
        # sample; the agent derives each turn's seed from the episode's seed instead
        "params": SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens),
        "max_context_tokens": args.max_context_tokens,
        "max_consecutive_invalid": args.max_consecutive_invalid,
    }
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
