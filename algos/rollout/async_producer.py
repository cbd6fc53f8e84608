"""Asynchronous rollouts with a bounded staleness: one producer thread, one bounded buffer.

The producer calls ``produce(index)`` for rounds ``start, start + 1, ...`` (a round: some groups
of episodes rolled out from the engine's latest weights) and never runs more than ``max_ahead``
rounds ahead of the consumer (rounds finished or in progress but not yet taken). The learner
takes rounds in order with :meth:`AsyncRollouts.get` while the producer keeps rolling out.

Staleness is checked in one place, :func:`split_stale`. Versions are the learner's optimiser
steps; every turn records the version that sampled it. A group (the episodes of one task that
share an advantage baseline) is as stale as its oldest turn: staleness = the learner's version
- the smallest turn version over all its episodes. A group more than ``max_staleness`` behind is
dropped whole and counted, never trained on; the others are kept whole, so a group that
straddles versions (in-flight weight updates between its episodes or turns) is still compared
only with its own members.

Shutdown: :meth:`AsyncRollouts.close` (also on ``with`` exit, so on errors and Ctrl-C) stops the
producer after the round it is in (``produce`` may watch :attr:`AsyncRollouts.stop_event` to
end sooner) and joins its thread. An exception in ``produce`` ends the producer and is raised
by the next :meth:`~AsyncRollouts.get` once the rounds finished before it are taken.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from agents.trajectory import Trajectory

log = logging.getLogger(__name__)

T = TypeVar("T")
_POLL_S = 0.1  # waits are short so Ctrl-C reaches a main thread blocked in get()


class ProducerClosed(RuntimeError):
    """``get`` on a closed :class:`AsyncRollouts`."""


@dataclass
class Round(Generic[T]):
    """What ``produce(index)`` returned, and how long it took."""

    index: int
    value: T
    wall_s: float


class AsyncRollouts(Generic[T]):
    """A background producer of rounds, at most ``max_ahead`` rounds ahead of :meth:`get`.

    Args:
        produce: ``produce(index) -> value``, called on the producer thread, in index order.
        max_ahead: rounds the producer may have finished or started but not handed out (>= 1).
        start: the first round's index (a resumed run continues its numbering).
        name: the producer thread's name.
        stop_event: set by :meth:`close`; ``produce`` may watch it to end a round early
            (default: a new event, :attr:`stop_event`).
    """

    def __init__(
        self,
        produce: Callable[[int], T],
        max_ahead: int,
        start: int = 0,
        name: str = "rollout-producer",
        stop_event: threading.Event | None = None,
    ):
        if max_ahead < 1:
            raise ValueError(f"max_ahead must be >= 1 (rounds produced ahead); got {max_ahead}")
        self._produce = produce
        self.max_ahead = max_ahead
        self._cond = threading.Condition()
        self._ready: deque[Round[T]] = deque()
        self._started = start  # index of the next round to start
        self._consumed = start  # index of the next round to hand out
        self._error: BaseException | None = None
        self.stop_event = stop_event if stop_event is not None else threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ consumer side
    @property
    def consumed(self) -> int:
        """The index of the next round :meth:`get` returns (= rounds handed out, from start)."""
        with self._cond:
            return self._consumed

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def get(self, timeout: float | None = None) -> Round[T]:
        """The next round in index order; blocks until it is produced.

        Raises the producer's exception once no finished round is left before it,
        :class:`ProducerClosed` after :meth:`close`, ``TimeoutError`` after ``timeout`` s.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._ready:
                if self._error is not None:
                    raise self._error
                if self._closed:
                    raise ProducerClosed("the rollout producer is closed")
                wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
                if wait <= 0:
                    raise TimeoutError(f"no rollout round within {timeout} s")
                self._cond.wait(wait)
            item = self._ready.popleft()
            self._consumed += 1
            self._cond.notify_all()
            return item

    def close(self, timeout: float = 60.0) -> bool:
        """Stop the producer and join its thread (idempotent); unconsumed rounds are dropped.
        Returns whether the thread ended within ``timeout`` (it is a daemon either way)."""
        with self._cond:
            self._closed = True
            self.stop_event.set()
            self._ready.clear()
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning(
                "rollout producer still in a round %.0f s after close; left to finish "
                "as a daemon thread",
                timeout,
            )
            return False
        return True

    def __enter__(self) -> AsyncRollouts[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ producer side
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and self._started - self._consumed >= self.max_ahead:
                    self._cond.wait()
                if self._closed:
                    return
                index = self._started
                self._started += 1
            t0 = time.monotonic()
            try:
                value = self._produce(index)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer by get()
                with self._cond:
                    if not self._closed:
                        log.error(
                            "rollout producer failed in round %d: %s: %s",
                            index,
                            type(exc).__name__,
                            exc,
                        )
                    self._error = exc
                    self._cond.notify_all()
                return
            with self._cond:
                if self._closed:
                    return
                self._ready.append(Round(index, value, time.monotonic() - t0))
                self._cond.notify_all()


# ------------------------------------------------------------------------------------------
# Staleness: the one check
# ------------------------------------------------------------------------------------------


def oldest_version(trajs: Sequence[Trajectory]) -> int | None:
    """The smallest turn version over ``trajs`` (each with ``policy_version_min``); None when
    no turn recorded one (e.g. episodes that failed before their first generation)."""
    versions = [v for v in (getattr(t, "policy_version_min", None) for t in trajs) if v is not None]
    return min(versions) if versions else None


@dataclass
class StalenessSplit:
    """Per episode whether it is kept, per kept group its staleness, and what was dropped."""

    keep: list[bool]
    staleness: list[int]  # one entry per kept group that has a version
    dropped_episodes: int = 0
    dropped_groups: int = 0


def split_stale(
    trajs: Sequence[Trajectory], groups: Sequence[int], learner_version: int, max_staleness: int
) -> StalenessSplit:
    """Keep or drop whole groups by their oldest turn (module docstring).

    ``groups[i]`` is the group of ``trajs[i]``. A group without any recorded version is kept
    (nothing says it is stale; the failure checks decide about it).
    """
    if len(trajs) != len(groups):
        raise ValueError(f"{len(trajs)} trajectories but {len(groups)} group ids")
    members: dict[int, list[Any]] = {}
    for traj, group in zip(trajs, groups, strict=True):
        members.setdefault(group, []).append(traj)
    stale: dict[int, bool] = {}
    out = StalenessSplit(keep=[], staleness=[])
    for group, items in members.items():
        oldest = oldest_version(items)
        age = None if oldest is None else learner_version - oldest
        stale[group] = age is not None and age > max_staleness
        if stale[group]:
            out.dropped_groups += 1
            out.dropped_episodes += len(items)
        elif age is not None:
            out.staleness.append(age)
    out.keep = [not stale[g] for g in groups]
    return out


def staleness_metrics(
    staleness: Sequence[int], dropped_episodes: int, dropped_groups: int
) -> dict[str, Any]:
    """The metrics row's staleness part: mean, max and histogram over the trained groups (in
    versions behind the learner) and what was dropped for being too stale."""
    hist = Counter(int(s) for s in staleness)
    return {
        "staleness_mean": sum(staleness) / len(staleness) if staleness else float("nan"),
        "staleness_max": max(staleness) if staleness else float("nan"),
        "staleness_hist": {str(k): hist[k] for k in sorted(hist)},
        "dropped_stale": dropped_episodes,
        "dropped_stale_groups": dropped_groups,
    }
