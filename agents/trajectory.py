"""Token-exact trajectories and their versioned JSONL form.

Why token-exact: docs/methods.md#token-exact-trajectories.

A trajectory is a list of turns. Turn ``t`` holds ``prompt_delta_ids``, the exact ids appended to
the context before its generation (turn 0: the whole initial prompt; later turns: the
end-of-turn ids the model did not sample, then the observation message and the generation
prompt), and ``completion_ids``, exactly as sampled, with their log-probs. Flattening
``delta_0, completion_0, delta_1, completion_1, ...`` gives the one sequence the learner trains on;
the prefix up to ``delta_t`` is exactly what the model was conditioned on at turn ``t``.

Loss mask: 1 on completion (policy) tokens, 0 on every prompt-delta token (system, user,
observation, template filler). ``mask_invalid=True`` also zeroes completions whose action the env
rejected (RFT masks format errors out of the loss, docs/methods.md#rft).

Policy versions (asynchronous RL): each turn records the engine's weights version that sampled
it (``Generation.policy_version``); with in-flight weight updates the turns of one episode may
differ. ``policy_version_min`` / ``_max`` summarise them (written to JSONL, derived on load).
Format 2 added the per-turn version; format 1 files still load (versions ``None``).

Branched groups (``agents.branching``): a branch's trajectory holds the trunk's turns,
token-identical, then its own; ``branch`` records where it came from (``parent_episode_id``,
``episode_id``, ``branch_turn``, ``branch_index`` among the group, the fork's ``fork_s``), or
that its group fell back to plain episodes (``fallback``: why, ``planned_turn``). Format 3 added
``branch``; format 1 and 2 files load with ``branch=None`` (a plain episode).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.protocols import Generation

FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)  # 1: before policy versions (read as None); 2: before ``branch``
DERIVED_FIELDS = ("policy_version_min", "policy_version_max")  # written, recomputed on load

# Why an episode ended. "submitted": the env terminated it (the agent submitted); "max_turns":
# the env truncated it; "sandbox_failed" / "grading_error": the env ended it by its own failure
# (info["end_reason"]); the rest are decided on the agent side.
FINISH_REASONS = (
    "submitted",
    "max_turns",
    "sandbox_failed",
    "grading_error",
    "context_overflow",
    "invalid_actions",
    "time_budget",
    "error",
    "timeout",
)
# Ends the env reports as its own failure (info["end_reason"]), not the agent's: a dead sandbox,
# a grader without a verdict. Kept as the finish reason so that training can tell them from a
# plain turn limit; the episode is scored 0.
ENV_FAILURES = ("sandbox_failed", "grading_error")
# Ends that say nothing about the policy: the rollout crashed (error) or ran past its time
# (timeout), or the env failed. Training masks them (mask_failed_groups); evaluation counts them
# against --max-error-share. max_turns is not one: it is the policy's doing.
FAILURES = ("error", "timeout", *ENV_FAILURES)


class _one_or_many:
    """A static method over a list of trajectories that an instance calls for itself alone."""

    def __init__(self, fn: Any):
        self.fn = fn

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return self.fn
        return lambda path: self.fn([obj], path)


@dataclass
class Turn:
    """One model call and the env step it drove."""

    prompt_delta_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    completion_finish_reason: str = "stop"  # "stop" or "length"
    action: str = ""  # the text stepped into the env
    observation: str = ""  # the env's reply to it
    invalid_action: bool = False
    invalid_reason: str | None = None
    tool: str | None = None
    reward: float = 0.0
    model_s: float = 0.0
    env_s: float = 0.0
    wall_s: float = 0.0  # the whole turn; wall_s - model_s - env_s is the agent's own overhead
    policy_version: int | None = None  # the engine weights that sampled completion_ids

    @classmethod
    def of_reply(
        cls,
        gen: Generation,
        prompt_delta_ids: Sequence[int],
        model_s: float,
        *,
        completion: tuple[Sequence[int], Sequence[float]] | None = None,
        action: str | None = None,
        **fields: Any,
    ) -> Turn:
        """The turn of one model reply ``gen``: the ids added to the prompt since the last turn,
        what was sampled (``completion``: ids and log-probs when the caller derived them, else
        the reply's own), its finish reason, the text stepped into the env (``action``, else the
        reply's text), the engine weights that sampled it and the model's time; ``fields``: any
        other field (the invalid-action flag, ``wall_s``)."""
        ids, logprobs = completion if completion is not None else (gen.token_ids, gen.logprobs)
        return cls(
            prompt_delta_ids=list(prompt_delta_ids),
            completion_ids=list(ids),
            completion_logprobs=list(logprobs),
            completion_finish_reason=gen.finish_reason,
            action=gen.text if action is None else action,
            model_s=model_s,
            policy_version=getattr(gen, "policy_version", None),
            **fields,
        )


@dataclass
class Trajectory:
    """One episode: turns, outcome, and what produced it."""

    task_id: str | None = None
    seed: int | None = None
    system_prompt: str = ""
    prompt: str = ""  # the env's first observation (the task)
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    resolved: bool = False
    patch: str = ""
    report: dict[str, Any] | None = None
    finish_reason: str = "error"  # one of FINISH_REASONS
    error: str | None = None  # why the agent side ended it (message), or the traceback
    model: str = ""
    sampling: dict[str, Any] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)
    token_exact: bool = False
    wall_s: float = 0.0
    # Branched groups: see the module docstring (None: a plain episode)
    branch: dict[str, Any] | None = None

    # ------------------------------------------------------------------ token views
    def _check_token_exact(self) -> None:
        if not self.token_exact:
            raise ValueError(
                f"trajectory of task {self.task_id!r} is not token-exact (model {self.model!r} "
                "gave no token ids); it cannot be turned into training samples"
            )

    def conditioned_ids(self, turn: int) -> list[int]:
        """The exact ids the model was conditioned on for generation ``turn``."""
        self._check_token_exact()
        ids: list[int] = []
        for t in self.turns[:turn]:
            ids += t.prompt_delta_ids + t.completion_ids
        return ids + self.turns[turn].prompt_delta_ids

    def to_sample_arrays(
        self, mask_invalid: bool = False
    ) -> tuple[list[int], list[int], list[float]]:
        """``(input_ids, loss_mask, logprobs)`` of the whole flattened episode.

        ``logprobs`` holds the sampling log-prob at completion positions and 0.0 elsewhere.
        """
        self._check_token_exact()
        ids: list[int] = []
        mask: list[int] = []
        logprobs: list[float] = []
        for t in self.turns:
            if len(t.completion_logprobs) != len(t.completion_ids):
                raise ValueError(
                    f"turn has {len(t.completion_ids)} completion ids but "
                    f"{len(t.completion_logprobs)} log-probs"
                )
            ids += t.prompt_delta_ids
            mask += [0] * len(t.prompt_delta_ids)
            logprobs += [0.0] * len(t.prompt_delta_ids)
            policy = 0 if (mask_invalid and t.invalid_action) else 1
            ids += t.completion_ids
            mask += [policy] * len(t.completion_ids)
            logprobs += list(t.completion_logprobs)
        return ids, mask, logprobs

    @property
    def policy_version_min(self) -> int | None:
        """The oldest weights version among the turns (None if no turn recorded one)."""
        versions = [t.policy_version for t in self.turns if t.policy_version is not None]
        return min(versions) if versions else None

    @property
    def policy_version_max(self) -> int | None:
        versions = [t.policy_version for t in self.turns if t.policy_version is not None]
        return max(versions) if versions else None

    @property
    def branch_turn(self) -> int | None:
        """Turns shared with the trunk (the first ``branch_turn`` turns), None unless branched."""
        if not self.branch or self.branch.get("fallback"):
            return None
        return int(self.branch["branch_turn"])

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def num_tokens(self) -> int:
        return sum(len(t.prompt_delta_ids) + len(t.completion_ids) for t in self.turns)

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            **dataclasses.asdict(self),
            "policy_version_min": self.policy_version_min,
            "policy_version_max": self.policy_version_max,
        }

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Trajectory:
        version = row.get("format_version")
        if version not in READABLE_VERSIONS:
            raise ValueError(
                f"trajectory format_version {version!r} is not supported; this code reads "
                f"versions {', '.join(map(str, READABLE_VERSIONS))}"
            )
        row = {k: v for k, v in row.items() if k != "format_version" and k not in DERIVED_FIELDS}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(row) - known)
        if unknown:
            raise ValueError(f"trajectory row has unknown fields {unknown}")
        turn_fields = {f.name for f in dataclasses.fields(Turn)}
        turns = []
        for t in row.pop("turns", []):
            bad = sorted(set(t) - turn_fields)
            if bad:
                raise ValueError(f"trajectory turn has unknown fields {bad}")
            turns.append(Turn(**t))
        return cls(turns=turns, **row)

    def to_swebench_prediction(self) -> dict[str, str]:
        """One row of a SWE-bench predictions file."""
        return {
            "instance_id": self.task_id or "",
            "model_name_or_path": self.model,
            "model_patch": self.patch or "",
        }

    @_one_or_many
    def save_jsonl(trajectories: Iterable[Trajectory], path: str | Path) -> Path:
        """Write one trajectory per line (``{"format_version": 3, ...}``):
        ``Trajectory.save_jsonl(trajectories, path)``, or ``traj.save_jsonl(path)`` for one."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as f:
            for traj in trajectories:
                # ensure_ascii keeps the file valid UTF-8 even if a model emitted lone surrogates.
                f.write(json.dumps(traj.to_dict(), ensure_ascii=True) + "\n")
        return path

    @classmethod
    def load_jsonl(cls, path: str | Path) -> list[Trajectory]:
        out = []
        with Path(path).open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    out.append(cls.from_dict(json.loads(line)))
                except ValueError as e:
                    raise ValueError(f"{path}:{lineno}: {e}") from e
        return out


def write_predictions(trajectories: Iterable[Trajectory], path: str | Path) -> Path:
    """SWE-bench predictions JSONL: ``{instance_id, model_name_or_path, model_patch}`` per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for traj in trajectories:
            f.write(json.dumps(traj.to_swebench_prediction(), ensure_ascii=True) + "\n")
    return path


save_jsonl = Trajectory.save_jsonl
load_jsonl = Trajectory.load_jsonl
