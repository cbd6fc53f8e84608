"""algos.objectives.filters (the dynamic-sampling keep rules) against values worked out by hand."""

from __future__ import annotations

from algos import objectives
from tests.algos.objectives.by_hand import T


def test_dynamic_filter_predicates():
    keep = objectives.keep_nonconstant_groups(T([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]))
    assert keep.tolist() == [[False] * 3, [True] * 3]
    keep = objectives.keep_nonconstant_groups(T([1.0, 0.0, 1.0, 1.0]), T([0, 0, 1, 2]))
    assert keep.tolist() == [True, True, False, False]  # single-sample groups are dropped
    assert objectives.keep_nonzero_advantage(T([0.0, 0.5, -0.1, 0.0])).tolist() == [
        False,
        True,
        True,
        False,
    ]
    per_tok = T([[0.0, 0.0, 2.0], [0.0, 1.0, 0.0]])
    mask = T([[1, 1, 0], [0, 1, 1]])
    # row 0's only nonzero advantage sits on a masked-out token
    assert objectives.keep_nonzero_advantage(per_tok, mask).tolist() == [False, True]
