"""The source work's curve in miniature: SmolLM2-135M base -> RFT -> DAPO on synthetic tasks.

1. Tasks: ``swe_gym.synth`` (the preset's tier: ``guided`` by default, ``located`` and ``easy``
   in ``swe_learning_located.yaml`` and ``swe_learning_easy.yaml``) on the bundled
   repositories, split with ``swe_gym.synth.split`` so that no held-out task shares a function
   with a training task. With ``synth.rft_repos`` (the default preset) RFT's tasks come from
   those repositories and DAPO's and the held-out ones from the others.
2. Base: ``python -m agents.evaluate`` on the held-out tasks (pass@1 over R runs, its s.e.), and
   the model's own runs on the training tasks (its train resolve rate, and RFT's data; none
   when ``own.runs`` is 0).
3. RFT (``python -m algos.rft --trajectories``, invalid actions masked) on the passing runs:
   the model's own, plus the oracle's where the own are fewer than ``own.min_resolved`` (a warm
   start; the table says which and how many); with the preset's ``probe_contexts`` and
   ``format_patience`` it runs epochs until the format-valid rate stops rising.
4. DAPO (``python -m algos.dapo``) from the RFT checkpoint on the training tasks, or with
   ``synth.max_rl`` on that many further training-side tasks RFT never saw (on its own tasks
   RFT's policy resolves nearly every group alike, which leaves DAPO no signal; so it does on
   other tasks of the repositories RFT trained on: ``swe_learning_mixed.yaml``). With ``--arm``
   or the preset's ``dapo_arms``, further DAPO configurations (e.g. branched groups) run from
   the same checkpoint over the same seeds (``swe_learning_arms.py``).
Every stage is evaluated the same way on the held-out tasks, with the preset's ``env_kwargs``
(e.g. ``prompt: compact``) in every stage. Prints a table (pass@1 ± s.e., resolved count,
format-valid rate, tokens per trajectory and the shared prompt's share, wall time), writes
benchmarks/results/swe_learning.json and swe_learning.png (``--out``) with paths relative to the
repository. Every stage is resumable: a re-run with the same ``--work`` reuses what finished.

    python benchmarks/bench_swe_learning.py [--preset FILE] [--runs 3] [--dapo-iterations 2] ...
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, Path(__file__).resolve().parent):  # the packages and the report module import
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
from swe_learning_arms import (  # noqa: E402
    PLAIN,
    compare_arms,
    parse_arms,
    print_arms,
    run_costs,
    run_name,
    stage_label,
)
from swe_learning_report import plot, rel, report  # noqa: E402
from swe_learning_runner import Runner  # noqa: E402
from swe_learning_stages import (  # noqa: E402
    EVAL_ENV_FLAGS,
    dapo_stage,
    engine_spec,
    evaluate,
    metrics,
    oracle_runs,
    write_config,
)
from swe_learning_tasks import make_tasks  # noqa: E402

RESULTS = Path(__file__).parent / "results"
PRESET = ROOT / "algos" / "presets" / "swe_learning.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", type=Path, default=PRESET, help=f"configuration (default {PRESET})")
    p.add_argument(
        "--work",
        type=Path,
        default=None,
        help="tasks, derived repositories, run directories (reused when re-run; "
        "default runs/<preset name>)",
    )
    p.add_argument("--out", type=Path, default=RESULTS / "swe_learning.json")
    p.add_argument("--repos", default=None, help="comma-separated bundled repositories")
    p.add_argument("--candidates", type=int, default=None, help="mutants tried per repository")
    p.add_argument("--max-train", type=int, default=None, help="at most this many training tasks")
    p.add_argument("--max-held-out", type=int, default=None, help="at most this many held out")
    p.add_argument(
        "--max-rl",
        type=int,
        default=None,
        help="DAPO's tasks: this many training-side tasks after RFT's (0: RFT's own tasks)",
    )
    p.add_argument(
        "--rft-repos",
        default=None,
        help="comma-separated: RFT's tasks come from these repositories only, DAPO's and the "
        "held-out ones from the others",
    )
    p.add_argument("--runs", type=int, default=None, help="R, held-out runs per task and stage")
    p.add_argument("--own-runs", type=int, default=None, help="own runs per training task")
    p.add_argument(
        "--min-own",
        type=int,
        default=None,
        help="fewer passing own runs than this: add the oracle's",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="episodes at once in an evaluation (one wave is fastest on a CPU engine)",
    )
    p.add_argument("--rft-epochs", type=int, default=None)
    p.add_argument("--dapo-iterations", type=int, default=None)
    p.add_argument(
        "--dapo-seeds",
        default=None,
        help="comma-separated: one DAPO run (and its held-out evaluation) per seed, from the "
        "same RFT checkpoint (default: the dapo section's seed)",
    )
    p.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="a further DAPO arm: the dapo settings it overrides, e.g. "
        'branched=\'{"branch_at": "turn:1"}\' (repeatable; the preset\'s dapo_arms too); '
        "every arm runs every seed from the same RFT checkpoint",
    )
    p.add_argument("--problems", type=int, default=None, help="DAPO problems per iteration")
    p.add_argument("--group-size", type=int, default=None, help="DAPO group size")
    p.add_argument(
        "--policy",
        default=None,
        help="smollm2 (default) or tiny-random (a smoke run: transformers engine)",
    )
    p.add_argument(
        "--overlap",
        action="store_true",
        help="run held-out evaluations beside the training stages that follow "
        "(default: every stage alone; overlapping only pays with cores and memory "
        "for two engines, each CPU vLLM engine takes about 2.7 GB)",
    )
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def load_config(args: argparse.Namespace) -> dict[str, Any]:
    cfg = yaml.safe_load(args.preset.read_text(encoding="utf-8"))
    missing = {"synth", "eval", "own", "rft", "dapo"} - set(cfg)
    if missing:
        raise SystemExit(f"--preset {args.preset}: sections {sorted(missing)} are missing")
    for value, section, key in (
        (args.repos and args.repos.split(","), "synth", "repos"),
        (args.candidates, "synth", "max_candidates"),
        (args.max_train, "synth", "max_train"),
        (args.max_held_out, "synth", "max_held_out"),
        (args.max_rl, "synth", "max_rl"),
        (args.rft_repos and args.rft_repos.split(","), "synth", "rft_repos"),
        (args.runs, "eval", "runs"),
        (args.own_runs, "own", "runs"),
        (args.concurrency, "eval", "concurrency"),
        (args.min_own, "own", "min_resolved"),
        (args.rft_epochs, "rft", "epochs"),
        (args.dapo_iterations, "dapo", "iterations"),
        (args.problems, "dapo", "problems_per_iteration"),
        (args.group_size, "dapo", "group_size"),
        (args.policy, "rft", "policy"),
    ):
        if value is not None:
            cfg[section][key] = value
    if args.dapo_seeds:
        try:
            cfg["dapo_seeds"] = [int(x) for x in args.dapo_seeds.split(",")]
        except ValueError:
            raise SystemExit(
                f"--dapo-seeds {args.dapo_seeds!r}: comma-separated integers, e.g. 0,1"
            ) from None
    seeds = cfg.get("dapo_seeds") or []
    if len(set(seeds)) != len(seeds) or not all(isinstance(x, int) for x in seeds):
        raise SystemExit(f"dapo_seeds={seeds}: distinct integers, one DAPO run each")
    cfg["dapo_arms"] = parse_arms(cfg.get("dapo_arms"), args.arm)
    cfg.setdefault("env_kwargs", {})  # every stage's env options (e.g. prompt: compact)
    cfg.setdefault("oracle", {})
    unknown = set(cfg["env_kwargs"]) - set(EVAL_ENV_FLAGS)
    if unknown:
        raise SystemExit(
            f"--preset {args.preset}: env_kwargs {sorted(unknown)} cannot reach the "
            f"evaluations; accepted: {sorted(EVAL_ENV_FLAGS)}"
        )
    if cfg["rft"].get("policy", "smollm2") == "tiny-random":  # no vLLM for a smoke run
        cfg["dapo"].update(engine="transformers", engine_dtype="float32", old_logprobs="auto")
    return cfg


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = load_config(args)
    work = (args.work or ROOT / "runs" / args.preset.stem).resolve()
    work.mkdir(parents=True, exist_ok=True)
    run = Runner(work, work / "repos", not args.no_progress)
    t_start = time.perf_counter()
    tasks = make_tasks(cfg, work, run)
    print(
        f"tasks: {tasks['n_train']} train ({tasks['functions_train']} functions), "
        f"{tasks['n_held_out']} held out ({tasks['functions_held_out']} functions)",
        flush=True,
    )
    policy = cfg["rft"].get("policy", "smollm2")
    if policy == "smollm2":
        from agents.models.smollm2 import smollm2_path

        base_folder = str(smollm2_path())
    else:  # tiny-random: a folder the engines and the trainers can all read
        from agents.models.smollm2 import tiny_random_model

        base_folder = str(work / "tiny-random-init")
        if not (Path(base_folder) / "config.json").exists():
            tiny_random_model(base_folder, seed=0)
    cfg["_tokenizer"] = base_folder
    ev_runs = cfg["eval"]["runs"]
    stages: list[dict[str, Any]] = []

    # (i) base: held-out pass@1, and the own runs on the training tasks
    # Held-out evaluations only read a checkpoint: with --overlap they run beside the training
    # stages that follow and are collected at the end (default: each before the next stage).
    pool = ThreadPoolExecutor(3)

    def held_out(name: str, folder: str) -> Any:
        job = pool.submit(
            evaluate,
            cfg,
            run,
            name,
            engine_spec(cfg, folder),
            tasks["held_out"],
            ev_runs,
            work / name,
        )
        if not args.overlap:
            job.result()
        return job

    base_job = held_out("eval-base", base_folder)
    own = {"pass@1": None, "resolved": 0, "episodes": 0, "wall_s": 0.0}
    traj_files = []
    if cfg["own"]["runs"] > 0:
        own = evaluate(
            cfg,
            run,
            "own-runs",
            engine_spec(cfg, base_folder),
            tasks["train"],
            cfg["own"]["runs"],
            work / "own-runs",
            seed=1,
        )
        traj_files.append(str(work / "own-runs" / "trajectories.jsonl"))
    stages.append({"stage": "base", "train_resolve_rate": own["pass@1"], "episodes": 0})

    # (ii) RFT on passing runs: the model's own, plus the oracle's when those are too few
    data = {"own_resolved": own["resolved"], "own_episodes": own["episodes"], "oracle_resolved": 0}
    oracle = None
    if own["resolved"] < cfg["own"]["min_resolved"]:
        oracle = oracle_runs(cfg, tasks["train"], work / "oracle-runs", work / "repos")
        traj_files.append(str(work / "oracle-runs" / "trajectories.jsonl"))
        data["oracle_resolved"] = oracle["resolved"]
        data["oracle_tokens_per_trajectory"] = oracle["tokens_per_trajectory"]
        data["oracle_shared_prompt_share"] = oracle["shared_prompt_share"]
    data["source"] = (
        "own"
        if oracle is None
        else ("own + oracle (warm start)" if cfg["own"]["runs"] else "oracle (warm start)")
    )
    rft_dir = work / "rft"
    rft_wall = run(
        "rft",
        "-m",
        "algos.rft",
        "--config",
        write_config(cfg["rft"], work / "rft.yaml"),
        "--run-dir",
        str(rft_dir),
        "--trajectories",
        ",".join(traj_files),
        "--progress",
        "false",
    )
    rft_ckpt = str(rft_dir / "checkpoint")
    rft_rows = metrics(rft_dir)
    data["steps"] = max((r["step"] for r in rft_rows), default=0)
    data["epochs_run"] = max((r["epoch"] for r in rft_rows), default=0)
    rft_job = held_out("eval-rft", rft_ckpt)
    rft_stage = {
        "stage": "RFT",
        "train_resolve_rate": None,
        "episodes": own["episodes"] + (oracle["episodes"] if oracle else 0),
        "wall_s": own["wall_s"] + (oracle["wall_s"] if oracle else 0) + rft_wall,
        "data": data,
    }
    stages.append(rft_stage)

    # (iii) DAPO from the RFT checkpoint on its tasks (synth.max_rl: ones RFT never saw), once
    # per seed of dapo_seeds and per arm (swe_learning_arms.py), interleaved by seed
    env_kwargs = {**cfg["env_kwargs"], **cfg["dapo"].get("env_kwargs", {}), "tasks": tasks["rl"]}
    arm_cfgs = {
        arm: write_config(
            {**cfg["dapo"], **over},
            work / ("dapo.yaml" if arm == PLAIN else f"dapo-{arm}.yaml"),
            policy=rft_ckpt,
            env_kwargs=env_kwargs,
        )
        for arm, over in cfg["dapo_arms"].items()
    }
    seeds = cfg.get("dapo_seeds") or [cfg["dapo"].get("seed", 0)]
    runs = []
    for i, seed in enumerate(seeds):
        for arm, dapo_cfg in arm_cfgs.items():
            name = run_name(arm, i, seed)
            same = seed == cfg["dapo"].get("seed", 0)  # the config's own seed: no flag
            wall = run(
                name,
                *("-m", "algos.dapo", "--config", dapo_cfg, "--run-dir", str(work / name)),
                *(() if same else ("--seed", str(seed))),
                *("--progress", "false"),
            )
            job = held_out(f"eval-{name}", str(work / name / "checkpoint"))
            runs.append((arm, i, seed, name, wall, metrics(work / name), job))
    stages[0]["held_out"] = base_job.result()
    stages[0]["wall_s"] = stages[0]["held_out"]["wall_s"]
    rft_stage["held_out"] = rft_job.result()
    for arm, i, seed, name, wall, seed_rows, job in runs:
        stages.append(dapo_stage(stage_label(arm, i, seed), seed, wall, seed_rows))
        stages[-1].update(arm=arm, run=name, costs=run_costs(seed_rows), held_out=job.result())
    pool.shutdown()
    # The RFT model's train resolve rate is DAPO's first iteration (sampled before any update).
    stages[1]["train_resolve_rate"] = stages[2]["first_resolve_rate"]
    rows = runs[0][5]  # the first run's metrics rows (the plain arm, first seed)

    for s in stages[1:]:  # the stage's held-out evaluation, listed apart from its training
        s["eval_wall_s"] = s["held_out"]["wall_s"]
    tasks = {
        **tasks,
        "train": rel(tasks["train"]),
        "held_out": rel(tasks["held_out"]),
        "rl": rel(tasks["rl"]),
    }
    result = report(cfg, tasks, stages, rft_rows, rows, time.perf_counter() - t_start)
    result["work"] = rel(work)
    result["arms"] = compare_arms(stages[2:], stages[1]["held_out"]["pass@1"])
    print_arms(result["arms"])
    # the sum of the stages' own wall times: the benchmark's cost even when a re-run resumed
    result["stage_wall_s"] = {**run.walls, **({"oracle-runs": oracle["wall_s"]} if oracle else {})}
    result["wall_s_stages_sum"] = sum(result["stage_wall_s"].values())
    print(
        f"stages' wall time, summed: {result['wall_s_stages_sum'] / 60:.1f} min "
        f"(this invocation: {result['wall_s'] / 60:.1f} min)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    png = plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
