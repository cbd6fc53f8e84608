"""algos.objectives.shaping (the overlong and turn-length penalties) against values worked out
by hand."""

from __future__ import annotations

import pytest

from algos import objectives
from tests.algos.objectives.by_hand import T, close


def test_overlong_penalty():
    # L_max 20, L_cache 4: free up to 16, linear to -1 at 20, -1 beyond
    got = objectives.overlong_penalty(T([10, 16, 17, 18, 20, 21]), max_len=20, cache_len=4)
    assert close(got, [0, 0, -0.25, -0.5, -1, -1])
    with pytest.raises(ValueError, match="cache_len"):
        objectives.overlong_penalty(T([1]), max_len=4, cache_len=8)


def test_turn_length_penalty():
    got = objectives.turn_length_penalty(T([5, 9, 10, 25, 40]), threshold=10, max_turns=40)
    assert close(got, [0, 0, 0, -0.5, -1])
    with pytest.raises(ValueError, match="max_turns"):
        objectives.turn_length_penalty(T([1]), threshold=10, max_turns=10)
