"""algos.rollout.async_producer on its own: a fake rollout function, versions, drops, group integrity,
shutdown on errors and on Ctrl-C, and no thread left behind."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field

import pytest

from algos.rollout.async_producer import (
    AsyncRollouts,
    ProducerClosed,
    split_stale,
    staleness_metrics,
)


@dataclass
class FakeTraj:
    """What the staleness check reads of a Trajectory: the oldest turn version."""

    versions: list[int | None] = field(default_factory=list)

    @property
    def policy_version_min(self) -> int | None:
        known = [v for v in self.versions if v is not None]
        return min(known) if known else None


@pytest.fixture(autouse=True)
def no_thread_leaks():
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not leaked, leaked


def test_rounds_come_in_order_and_never_more_than_max_ahead():
    violations = []
    holder: dict[str, AsyncRollouts] = {}
    started = threading.Event()

    def produce(index: int) -> int:
        started.wait()
        src = holder["src"]
        if index >= src.consumed + src.max_ahead:
            violations.append(index)
        return index * 10

    with AsyncRollouts(produce, max_ahead=2, start=5) as src:
        holder["src"] = src
        started.set()
        got = [src.get(timeout=30) for _ in range(8)]
    assert [r.index for r in got] == list(range(5, 13))
    assert [r.value for r in got] == [i * 10 for i in range(5, 13)]
    assert not violations


def test_learner_loop_with_versions_keeps_staleness_within_k():
    """A learner taking one version per round: with max_ahead = K nothing is older than K."""
    for k in (1, 2):
        version = {"engine": 0}

        def produce(index: int, version: dict[str, int] = version) -> list[FakeTraj]:
            v = version["engine"]  # the latest pushed weights when the round starts
            return [FakeTraj([v, v]), FakeTraj([v])]

        learner = 0
        ages = []
        with AsyncRollouts(produce, max_ahead=k) as src:
            for _ in range(10):
                trajs = src.get(timeout=30).value
                split = split_stale(trajs, [0, 0], learner, max_staleness=k)
                assert all(split.keep) and split.dropped_episodes == 0
                ages += split.staleness
                learner += 1  # one optimiser step, then the push
                version["engine"] = learner
        assert max(ages) <= k


def test_a_group_straddling_versions_is_as_old_as_its_oldest_turn():
    # group 0: one episode sampled at 6, one whose first turn was at 3 and last at 6
    # group 1: every turn at 5
    trajs = [FakeTraj([6]), FakeTraj([3, 5, 6]), FakeTraj([5]), FakeTraj([5, 5])]
    groups = [0, 0, 1, 1]
    split = split_stale(trajs, groups, learner_version=6, max_staleness=2)
    assert split.keep == [False, False, True, True]  # whole groups, never a part of one
    assert split.dropped_episodes == 2 and split.dropped_groups == 1
    assert split.staleness == [1]
    kept_all = split_stale(trajs, groups, learner_version=6, max_staleness=3)
    assert all(kept_all.keep) and sorted(kept_all.staleness) == [1, 3]


def test_groups_without_versions_are_kept_and_not_counted():
    split = split_stale(
        [FakeTraj([]), FakeTraj([None])], [4, 4], learner_version=9, max_staleness=1
    )
    assert split.keep == [True, True] and split.staleness == [] and split.dropped_groups == 0
    with pytest.raises(ValueError, match="2 trajectories but 1 group ids"):
        split_stale([FakeTraj([1]), FakeTraj([1])], [0], 1, 1)


def test_staleness_metrics():
    row = staleness_metrics([0, 1, 1, 2], dropped_episodes=8, dropped_groups=1)
    assert row["staleness_mean"] == 1.0 and row["staleness_max"] == 2
    assert row["staleness_hist"] == {"0": 1, "1": 2, "2": 1}
    assert row["dropped_stale"] == 8 and row["dropped_stale_groups"] == 1


def test_producer_exception_reaches_the_consumer_after_the_good_rounds():
    def produce(index: int) -> int:
        if index == 2:
            raise ConnectionError("sandbox host unreachable")
        return index

    src = AsyncRollouts(produce, max_ahead=3)
    try:
        assert [src.get(timeout=30).index for _ in range(2)] == [0, 1]
        with pytest.raises(ConnectionError, match="unreachable"):
            src.get(timeout=30)
        with pytest.raises(ConnectionError):  # and again: the producer is gone
            src.get(timeout=30)
        assert not src.alive
    finally:
        src.close()


def test_error_in_the_consumer_closes_the_producer():
    with pytest.raises(RuntimeError, match="learner broke"):
        with AsyncRollouts(lambda i: i, max_ahead=2) as src:
            src.get(timeout=30)
            raise RuntimeError("learner broke")
    assert not src.alive
    with pytest.raises(ProducerClosed):
        src.get(timeout=1)


def test_close_stops_a_round_that_watches_the_stop_event():
    entered, stop = threading.Event(), threading.Event()

    def produce(index: int) -> int:
        entered.set()
        stop.wait(60)  # a long rollout that ends when asked to
        return index

    src = AsyncRollouts(produce, max_ahead=1, stop_event=stop)
    assert entered.wait(30)
    assert src.close(timeout=30) and not src.alive


def test_ctrl_c_while_waiting_for_a_round_shuts_down_cleanly():
    """A real SIGINT while the main thread is blocked in get() (the round never ends on its
    own) raises KeyboardInterrupt there, and the with-block closes the producer.

    No timing: the signal is sent once get() is entered (an event), and Python's own handler is
    installed for the test, since a process started as a shell's background job inherits SIGINT
    ignored (where a simulated Ctrl-C, _thread.interrupt_main, does nothing)."""
    stop, in_get = threading.Event(), threading.Event()

    def produce(index: int) -> int:
        stop.wait(300)  # ends when close() sets stop
        return index

    class Rollouts(AsyncRollouts[int]):
        def get(self, timeout: float | None = None):
            in_get.set()
            return super().get(timeout)

    def ctrl_c() -> None:
        if in_get.wait(300):
            os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=ctrl_c, name="ctrl-c")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with Rollouts(produce, max_ahead=1, stop_event=stop) as src:
                sender.start()
                src.get()
    finally:
        if sender.ident is not None:  # started: get() was entered, so it has sent the signal
            sender.join()
        signal.signal(signal.SIGINT, previous)
    assert not src.alive and stop.is_set()


def test_max_ahead_must_be_positive():
    with pytest.raises(ValueError, match="max_ahead must be >= 1.*got 0"):
        AsyncRollouts(lambda i: i, max_ahead=0)
