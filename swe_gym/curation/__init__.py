"""SWE-RL data curation: GH Archive events + local clones -> SWE-rebench rows
(docs/methods.md#swe-rl).

``curate(CurationConfig(...)) -> Summary``; CLI ``python -m swe_gym.curate``.
"""

from swe_gym.curation.events import EventIndex, read_events
from swe_gym.curation.pipeline import CurationConfig, Summary, curate, curate_pr
from swe_gym.curation.rules import classify_licence, is_bot_pr, is_test_path, linked_issue_numbers

__all__ = [
    "CurationConfig",
    "EventIndex",
    "Summary",
    "classify_licence",
    "curate",
    "curate_pr",
    "is_bot_pr",
    "is_test_path",
    "linked_issue_numbers",
    "read_events",
]
