"""A ``gymnasium.spaces.Text`` that holds any Unicode string.

Tool output and model replies contain arbitrary characters, but ``Text.contains`` only accepts
characters from a finite charset (alphanumerics by default); a charset of all of Unicode would
cost a 1.1M-element set. ``UnicodeText`` keeps ``Text``'s length bounds and its sampling (printable
ASCII, so ``action_space.sample()`` still yields usable junk actions) and accepts every ``str``.
"""

from __future__ import annotations

import string
from typing import Any

from gymnasium.spaces import Text


class UnicodeText(Text):
    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length, min_length=min_length, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"
