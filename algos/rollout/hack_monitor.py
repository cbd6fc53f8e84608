"""The online reward-hack monitor: every scored episode is checked for hack signals
(``swe_gym.audit.signals``) from the grader's report and its final patch against the task, and
each rewarded one that shows a signal is handled by that signal's policy:

- ``mask`` (default): the episode leaves the batch before advantages are computed, so it gives
  no gradient and does not move its group's baseline;
- ``penalise``: its reward becomes ``penalty`` (default -1.0, below an unresolved episode's 0);
- ``log``: counted and shown, trained as rewarded.

A signal on an unrewarded episode (a tampering attempt the grader already paid 0) is counted as
an attempt and changes nothing. Counts go to the iteration's metrics row (``hack_rate``: flagged
share of the rewarded episodes), and each flagged episode's signals to its saved report
(``report["hack_signals"]``), which the run report shows. The same path serves every trainer
and both rollout modes, built-in agent and agent programs alike: it runs where episodes become
scored samples (``scoring.score_groups``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from algos.config.checks import HACK_ACTIONS, check_policy
from swe_gym.audit.signals import Signal, hack_signals

# Where a signal has more than one policy in play, the strongest wins.
_STRENGTH = {"log": 0, "penalise": 1, "mask": 2}


@dataclass
class TaskFacts:
    """What the monitor reads of a task: the issue (for quoted literals) and the gold patch
    (its own added code is the baseline of the patch signals)."""

    issue: str = ""
    gold_patch: str = ""


@dataclass
class HackMonitor:
    policy: dict[str, str]
    penalty: float = -1.0
    tasks: dict[str, TaskFacts] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        policy: Mapping[str, str] | None = None,
        default: str = "mask",
        penalty: float = -1.0,
        tasks: Any = (),
    ) -> HackMonitor:
        """``tasks``: ``Task`` objects (``instance_id``, ``problem_statement``, ``patch``; a
        task without the texts, or an episode of no listed task, is checked on its report and
        patch alone)."""
        facts = {
            t.instance_id: TaskFacts(getattr(t, "problem_statement", ""), getattr(t, "patch", ""))
            for t in tasks
            if hasattr(t, "instance_id")
        }
        return cls(check_policy(policy or {}, default), float(penalty), facts)

    def signals(self, traj: Any) -> list[Signal]:
        facts = self.tasks.get(traj.task_id or "", TaskFacts())
        return hack_signals(
            traj.patch or "", traj.report, issue=facts.issue, gold_patch=facts.gold_patch
        )

    def action(self, signals: list[Signal]) -> str:
        return max((self.policy[s.name] for s in signals), key=_STRENGTH.__getitem__)

    def apply(self, scored: list[Any], counters: Any) -> list[Any]:
        """``scored`` (``Scored`` episodes) after the policy: masked ones removed, penalised ones
        with the penalty as reward; counts into ``counters``."""
        kept = []
        for s in scored:
            rewarded = s.reward > 0
            counters.rewarded += int(rewarded)
            found = self.signals(s.traj)
            if not found:
                kept.append(s)
                continue
            counters.hack_attempts += 1
            if not rewarded:
                kept.append(s)
                continue
            counters.hack_flagged += 1
            action = self.action(found)
            record = [{"signal": x.name, "detail": x.detail, "action": action} for x in found]
            if isinstance(s.traj.report, dict):
                s.traj.report["hack_signals"] = record
            else:
                s.traj.report = {"hack_signals": record}
            if action == "mask":
                counters.hack_masked += 1
                continue
            if action == "penalise":
                counters.hack_penalised += 1
                s.reward = self.penalty
            kept.append(s)
        return kept

    def keep_for_sft(self, trajs: list[Any], counters: Any) -> list[Any]:
        """RFT's resolved trajectories less the flagged ones whose action is not ``log`` (a
        penalty has no meaning for imitation: ``penalise`` drops them as ``mask`` does)."""
        kept = []
        for t in trajs:
            counters.rewarded += 1
            found = self.signals(t)
            if found:
                counters.hack_attempts += 1
                counters.hack_flagged += 1
                action = self.action(found)
                record = [{"signal": x.name, "detail": x.detail, "action": action} for x in found]
                t.report = {**(t.report or {}), "hack_signals": record}
                if action != "log":
                    counters.hack_masked += 1
                    continue
            kept.append(t)
        return kept


__all__ = ["HACK_ACTIONS", "HackMonitor", "TaskFacts", "check_policy"]
