"""Tests that failed for want of the network: a sandbox has none (only ``lo``), so a test that
downloads its data (pydicom's test files, a schema, a URL it checks) fails there whatever the
patch does. Such a failure is reported by name (``needs_network``) so that a gold patch that
"does not resolve" for that reason says so, instead of reading as a broken row.

Evidence is read from the test log: pytest's failure sections (``____ name ____``) and its
short summary lines (``FAILED id - message``), searched for the errors a resolver or a socket
gives offline. A failing test is named only when its own section or summary line shows one.
"""

from __future__ import annotations

import re

# What Python and its HTTP clients say when no name resolves and no route exists.
NETWORK_ERRORS = re.compile(
    r"Temporary failure in name resolution|Name or service not known|"
    r"nodename nor servname provided|No address associated with hostname|getaddrinfo failed|"
    r"socket\.gaierror|gaierror|Network is unreachable|No route to host|"
    r"Failed to establish a new connection|NameResolutionError|"
    r"urlopen error|URLError|MaxRetryError|ConnectTimeout|"
    r"requests\.exceptions\.ConnectionError|httpx\.ConnectError|aiohttp\.client_exceptions"
)
_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$", re.M)
_BANNER = re.compile(r"^={3,}", re.M)  # pytest's "=== short test summary info ===" and the like
_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (\S+)(?: - (.*))?$", re.M)


def _sections(log: str) -> dict[str, str]:
    """Failure section title -> its text (pytest titles a test ``name`` or ``Class.name``)."""
    heads = list(_SECTION.finditer(log))
    out: dict[str, str] = {}
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(log)
        if (banner := _BANNER.search(log, m.end(), end)) is not None:
            end = banner.start()
        title = m.group(1).strip()
        out[title.removeprefix("ERROR at setup of ").removeprefix("ERROR at teardown of ")] = log[
            m.end() : end
        ]
    return out


def _titles(test_id: str) -> tuple[str, ...]:
    """The section titles pytest gives ``test_id`` (``a.py::C::test_x[1]`` -> ``C.test_x[1]``)."""
    parts = test_id.split("::")
    if len(parts) < 2:
        return (test_id,)
    return (".".join(parts[1:]), parts[-1])


def network_failures(log: str, failed: list[str]) -> list[str]:
    """The ids among ``failed`` whose failure shows a network error in ``log``."""
    if not failed or not NETWORK_ERRORS.search(log):
        return []
    sections = _sections(log)
    summary = {m.group(1): m.group(2) or "" for m in _SUMMARY.finditer(log)}
    out = []
    for t in failed:
        texts = [summary.get(t, "")] + [sections.get(x, "") for x in _titles(t)]
        if any(NETWORK_ERRORS.search(x) for x in texts if x):
            out.append(t)
    return out


__all__ = ["NETWORK_ERRORS", "network_failures"]
