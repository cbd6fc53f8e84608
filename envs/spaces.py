"""A ``gymnasium.spaces.Text`` that holds any Unicode string.

Tool output and model replies contain arbitrary characters, but ``Text.contains`` only accepts
characters from a finite charset (alphanumerics by default); a charset of all of Unicode would
cost a 1.1M-element set. ``UnicodeText`` keeps ``Text``'s length bounds and its sampling (printable
ASCII, so ``action_space.sample()`` still yields usable junk actions) and accepts every ``str``,
lone surrogates included.

``gymnasium.vector.AsyncVectorEnv`` (``shared_memory=True``, its default) stores a ``Text``
observation as charset indices, which fails on any other character; and it reads the buffer
once, at construction, then deep-copies that object after every step: a ``Box``'s array is a
live view, but ``Text``'s tuple of str never changes. The handlers registered below store a
``UnicodeText`` value as its length then its code points, and read it through a live view
that decodes on access and deep-copies to a tuple of str.
"""

from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)


class UnicodeText(Text):
    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length, min_length=min_length, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


# Shared memory: per env, one int32 slot holding the length, then max_length code points.
# UTF-32 with surrogatepass maps every str, lone surrogates included, one to one.


@create_shared_memory.register(UnicodeText)
def _create(space: UnicodeText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


class SharedTexts(Sequence[str]):
    """The strings in a ``UnicodeText`` shared buffer, decoded when read (see the module doc)."""

    def __init__(self, data: np.ndarray):
        self._data = data  # (n, max_length + 1) int32 view of the shared buffer

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self)[i]
        row = self._data[i]
        return row[1 : 1 + int(row[0])].astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __repr__(self) -> str:
        return repr(tuple(self))


@read_from_shared_memory.register(UnicodeText)
def _read(space: UnicodeText, shared_memory: Any, n: int = 1) -> SharedTexts:
    data = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)
    return SharedTexts(data.reshape(n, space.max_length + 1))


@write_to_shared_memory.register(UnicodeText)
def _write(space: UnicodeText, index: int, value: str, shared_memory: Any) -> None:
    if not isinstance(value, str) or len(value) > space.max_length:
        raise ValueError(
            f"{space!r} holds strings of at most {space.max_length} characters, got "
            f"{type(value).__name__} of length {len(value) if isinstance(value, str) else '?'}"
        )
    size = space.max_length + 1
    row = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * size : (index + 1) * size]
    row[0] = len(value)
    row[1 : 1 + len(value)] = np.frombuffer(value.encode("utf-32-le", "surrogatepass"), dtype="<u4")
