"""The grader's own record of a pytest run, checked against the log the test process printed.

The patched code runs inside the test process: it can print ``PASSED`` lines, rewrite pytest's
report objects or leave with ``os._exit`` before the failures are printed. So grading does not
take the log alone. Before the model patch is applied, ``probe_environment`` asks the task's
own interpreter (at the base commit, nothing of the patch present) which pytest plugins it
declares and which top-level modules it installs. The tests then run with plugin auto-loading
off and ``swe_gym/grading/verdict_plugin.py`` loaded first: it loads the declared plugins, and records
each test phase's outcome from the phase's exception, HMAC-signed under a key made for this run
(handed over in a file the plugin deletes at import). ``read_channel`` checks every record's signature
and sequence, ``channel_status`` turns the records into a status map keyed as the task's log
parser keys the log, and ``compare`` finds the task's tests whose logged result the records do
not back. Grading fails such a run (``swe_gym.grading``).

The records back a test by its exact node id. A key the parser cut at a space inside the
parameters (``t.py::f[a`` from ``t.py::f[a b]``) is backed only when every node id it was cut
from passed (``_lookup``). A key no test file can define (``node_id_form``: ``[100%]``, ``[``,
made by swebench's parser from an inner pytest's progress lines, listed in published rows) can
never be backed, and stands for no test: ``compare`` leaves it out, and grading judges it on
the log under the ``official`` rule and not at all under ``rl`` (``log_only``).

Applies to pytest runs (``PYTEST_PARSERS``); other runners (Django's, SymPy's) are graded on
their log alone, and the report says so.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_gym.errors import FileTooLarge
from swe_gym.sandbox import Sandbox

PYTEST_PARSERS = frozenset({"parse_log_pytest", "parse_log_pytest_options", "parse_log_pytest_v2"})
PLUGIN_MODULE = "swe_gym_verdict"
GUARD_MODULE = "swe_gym_guard"
MAX_RECORD_BYTES = 64 * 2**20  # more than any honest run writes; past it the channel is broken
PASSING = frozenset({"PASSED", "XFAIL"})
_UNSET = "__swe_gym_unset__"  # the variable was not set before the grader's run

# Runs under the task's interpreter (any Python 3), from the working copy at the base commit.
_PROBE = r"""
import json, os, pkgutil, sys
here = os.path.realpath(os.getcwd())
def eps():
    try:
        from importlib.metadata import entry_points
    except ImportError:
        import pkg_resources
        return [(e.name, e.module_name) for e in pkg_resources.iter_entry_points("pytest11")]
    e = entry_points()
    e = e.select(group="pytest11") if hasattr(e, "select") else e.get("pytest11", [])
    return [(x.name, x.value.split(":")[0].strip()) for x in e]
dirs = [p for p in sys.path if p and os.path.isdir(p) and os.path.realpath(p) != here]
mods = sorted(set(m.name for m in pkgutil.iter_modules(dirs)) | set(sys.builtin_module_names))
print("SWE_GYM_PROBE " + json.dumps({"plugins": sorted(set(eps())), "modules": mods}))
"""


@dataclass
class Environment:
    """What the task's environment declares, read before the patch is applied."""

    plugins: list[tuple[str, str]] = field(default_factory=list)  # (entry-point name, module)
    modules: set[str] = field(default_factory=set)  # installed top-level module names
    error: str = ""  # the probe failed: grading goes on with no plugins and no shadow check


def probe_environment(sandbox: Sandbox, env_prefix: str = "") -> Environment:
    """Ask the task's interpreter (``python``, else ``python3``) for its pytest plugins and its
    installed top-level modules. Run in a sandbox that holds the base commit only."""
    wd = shlex.quote(sandbox.workdir)
    py = "$(command -v python || command -v python3)"
    res = sandbox.run(
        f"cd {wd} && {{ {env_prefix}{py} -c {shlex.quote(_PROBE)}; }} 2>&1 < /dev/null", timeout=120
    )
    for line in reversed(res.output.splitlines()):
        if line.startswith("SWE_GYM_PROBE "):
            data = json.loads(line.split(" ", 1)[1])
            return Environment([tuple(p) for p in data["plugins"]], set(data["modules"]))
    return Environment(error=f"the environment probe printed no result: {res.output[-500:]}")


@dataclass
class Channel:
    """One run's record file (relative to the workdir) and its key."""

    path: str
    key: str
    exports: str  # shell: write the plugin and key file, export what loads the plugin


# Shipped as files: the plugin, the guard and its parts (``guard.install`` runs each part from
# a private copy), by the module name each gets in the sandbox.
SHIPPED = {
    PLUGIN_MODULE: "verdict_plugin.py",
    GUARD_MODULE: "guard.py",
    f"{GUARD_MODULE}_checks": "guard_checks.py",
    f"{GUARD_MODULE}_events": "guard_events.py",
    f"{GUARD_MODULE}_io": "guard_io.py",
}


@functools.cache
def _shipped() -> dict[str, str]:
    """The shipped files as base64, by module name, read once per process: a run keeps the
    files it started with even if the checkout changes under it."""
    here = Path(__file__).parent
    return {
        module: base64.b64encode((here / name).read_bytes()).decode()
        for module, name in SHIPPED.items()
    }


def prepare(
    sandbox: Sandbox, work_dir: str, env: Environment, guard: dict[str, Any] | None = None
) -> Channel:
    """The run's channel: the plugin, its guard and the key file are written by the test
    command's own shell just before the tests start (no file API round trips: on Docker each
    costs a request), then the variables that load the plugin are exported. ``guard``: the
    guard's inputs (``patched``, ``tests``: paths relative to the workdir; ``watched``: the
    task's test ids), written as one file."""
    key, name = secrets.token_hex(32), secrets.token_hex(8)
    folder = f"{work_dir}/verdict"
    root = sandbox.workdir.rstrip("/")
    path, keyfile = f"{folder}/{name}.rec", f"{root}/{folder}/{name}.key"
    guard_file = f"{folder}/{name}.json"
    sandbox.write_file(guard_file, json.dumps({"root": root, **(guard or {})}))
    exports = f"mkdir -p {root}/{folder} && " + "".join(
        f"printf %s {code} | base64 -d > {root}/{folder}/{module}.py && "
        for module, code in _shipped().items()
    )
    exports += f"(umask 077; printf %s {key} > {keyfile}); "
    exports += "".join(
        f'export SWE_GYM_VERDICT_OLD_{v}="${{{v}-{_UNSET}}}"; '
        for v in ("PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTHONPATH")
    )
    # The key goes by a file the plugin reads and deletes: a process's initial environment
    # stays readable in /proc/self/environ whatever it unsets later.
    exports += (
        f"export SWE_GYM_VERDICT_KEYFILE={shlex.quote(keyfile)} "
        f"SWE_GYM_VERDICT_PATH={shlex.quote(f'{root}/{path}')} "
        f"SWE_GYM_VERDICT_GUARD={shlex.quote(f'{root}/{guard_file}')} "
        f"SWE_GYM_VERDICT_PLUGINS={shlex.quote(json.dumps(env.plugins))} "
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "
        f'PYTEST_PLUGINS="{PLUGIN_MODULE}${{PYTEST_PLUGINS:+,$PYTEST_PLUGINS}}" '
        f'PYTHONPATH={shlex.quote(f"{root}/{folder}")}"${{PYTHONPATH:+:$PYTHONPATH}}"; '
    )
    return Channel(path, key, exports)


@dataclass
class ChannelResult:
    """What the records say. ``problem`` is set when they cannot be trusted or are incomplete."""

    own: dict[str, dict[str, str]] = field(default_factory=dict)  # nodeid -> when -> outcome
    rep: dict[str, dict[str, tuple[str, bool]]] = field(default_factory=dict)  # (outcome, xfail)
    sessions: int = 0
    ended: int = 0
    plugins: list[str] = field(default_factory=list)
    tampered: list[str] = field(default_factory=list)  # the guard's findings (guard.py)
    conflicts: set[str] = field(default_factory=set)  # node ids recorded twice with two outcomes
    runner_patched: list[str] = field(default_factory=list)  # the runner's modules, patched
    problem: str | None = None  # channel_missing | channel_forged | session_incomplete
    detail: str = ""


def read_channel(sandbox: Sandbox, channel: Channel) -> ChannelResult:
    """Read and verify the record file (through the sandbox's file API, never its shell)."""
    out = ChannelResult()
    try:
        raw = sandbox.read_file(channel.path, max_bytes=MAX_RECORD_BYTES)
    except FileTooLarge as e:
        out.problem, out.detail = "channel_forged", f"record file of {e.size} bytes"
        return out
    except (FileNotFoundError, ValueError, OSError) as e:
        out.problem, out.detail = "channel_missing", f"no record file: {type(e).__name__}"
        return out
    key = channel.key.encode()
    seqs: dict[Any, int] = {}  # the last sequence number of each process id
    for n, line in enumerate(raw.split(b"\n")[:-1] if raw.endswith(b"\n") else raw.split(b"\n")):
        mac, _, body = line.partition(b"\t")
        good = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(mac, good):
            out.problem, out.detail = "channel_forged", f"record {n + 1} has a bad signature"
            return out
        pid, seq, kind, *rest = json.loads(body.decode("utf-8", "surrogateescape"))  # signed
        if seq != seqs.get(pid, 0) + 1:
            out.problem, out.detail = "channel_forged", f"record {n + 1} is out of sequence"
            return out
        seqs[pid] = seq
        if kind == "start":
            out.sessions += 1
            out.plugins = sorted(set(out.plugins) | set(rest[0]))
        elif kind == "end":
            out.ended += 1
        elif kind == "tamper":
            out.tampered.append(str(rest[1]))
        elif kind == "runner":  # the guard cannot stand apart from a patched runner
            out.runner_patched = sorted(set(out.runner_patched) | set(rest[0]))
        elif kind == "own":  # a node id run twice (two items, one id) keeps its worse outcome
            phases = out.own.setdefault(rest[0], {})
            if phases.get(rest[1], rest[2]) != rest[2]:
                out.conflicts.add(rest[0])
                if phases[rest[1]] == "passed":
                    phases[rest[1]] = rest[2]
            else:
                phases[rest[1]] = rest[2]
        elif kind == "rep":
            reps = out.rep.setdefault(rest[0], {})
            if reps.get(rest[1], (rest[2],))[0] != rest[2]:
                out.conflicts.add(rest[0])
                if reps[rest[1]][0] != "passed":
                    continue
            reps[rest[1]] = (rest[2], bool(rest[3]))
    if out.sessions == 0:
        out.problem, out.detail = "channel_missing", "the plugin never started"
    elif out.ended < out.sessions:
        out.problem = "session_incomplete"
        out.detail = (
            f"{out.sessions - out.ended} of {out.sessions} pytest session(s) never finished"
        )
    return out


def _phase(res: ChannelResult, nodeid: str, when: str) -> tuple[str | None, bool]:
    """The phase's outcome: our own reading where we have it, else pytest's report (a remote
    xdist worker's phase reaches the controller only as a report)."""
    rep, xfail = res.rep.get(nodeid, {}).get(when, (None, False))
    own = res.own.get(nodeid, {}).get(when)
    if own is None:
        return rep, xfail
    if own == "passed" and rep not in (None, "passed"):  # e.g. a strict XPASS reported failed
        return rep, xfail
    return own, xfail


_ORDER = ("PASSED", "XFAIL", "XPASS", "ERROR", "FAILED")  # the order of pytest's -rA summary


def summary_lines(res: ChannelResult) -> list[str]:
    """The records as the lines of pytest's ``-rA`` summary (skips, which that summary names
    by file and line only, are left out), so that the task's own parser keys them as it keys
    the log: a passed test whose teardown failed is both PASSED and ERROR, as pytest says.
    ERROR and FAILED lines carry a reason, as pytest's do (some parsers key ERROR lines with
    it); XFAIL and XPASS lines none (``_lookup`` matches the log's reason-keyed ones)."""
    lines: dict[str, list[str]] = {k: [] for k in _ORDER}
    for nodeid in sorted(set(res.own) | set(res.rep)):
        setup, sx = _phase(res, nodeid, "setup")
        call, cx = _phase(res, nodeid, "call")
        teardown, _ = _phase(res, nodeid, "teardown")
        if setup == "failed":
            lines["ERROR"].append(f"ERROR {nodeid} - setup")
            continue
        if setup in ("skipped", "xfailed") or call is None:
            if sx or setup == "xfailed":
                lines["XFAIL"].append(f"XFAIL {nodeid}")
        elif call == "passed":
            lines["XPASS" if cx else "PASSED"].append(f"{'XPASS' if cx else 'PASSED'} {nodeid}")
        elif call == "xfailed" or (call in ("failed", "skipped") and cx):
            lines["XFAIL"].append(f"XFAIL {nodeid}")
        elif call != "skipped":
            lines["FAILED"].append(f"FAILED {nodeid} - failed")
        if teardown == "failed":
            lines["ERROR"].append(f"ERROR {nodeid} - teardown")
    return [line for k in _ORDER for line in lines[k]]


def exact_status(res: ChannelResult, parser: str) -> dict[str, str]:
    """The records' status of each exact node id. Each node id's summary lines go through the
    task's parser on their own, so its rules hold (a passed test whose teardown failed reads
    as that parser reads it) while no line can stand for another id: over the whole summary a
    parser keys ``PASSED path::test_x twin`` as ``path::test_x``."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    by_id: dict[str, list[str]] = {}
    for line in summary_lines(res):
        status, _, rest = line.partition(" ")
        nodeid = rest.rsplit(" - ", 1)[0] if status in ("ERROR", "FAILED") else rest
        by_id.setdefault(nodeid, []).append(line)
    out: dict[str, str] = {}
    for nodeid, lines in by_id.items():
        parsed = PARSER_REGISTRY[parser]("\n".join(lines), None)
        if nodeid in parsed:
            out[nodeid] = parsed[nodeid]
        elif parsed:  # keyed otherwise (cut at a space, or with the reason): the parser's last
            out[nodeid] = list(parsed.values())[-1]
    return out


def injected(res: ChannelResult) -> list[str]:
    """Node ids no test file can define: a name part (outside ``[...]`` parameters) that is
    not an identifier, e.g. ``test_x twin`` made at run time to collide with ``test_x``."""
    bad = []
    for nodeid in sorted(set(res.own) | set(res.rep)):
        parts = nodeid.split("[", 1)[0].split("::")[1:]
        if any(not p.isidentifier() for p in parts):
            bad.append(nodeid)
    return bad


def _lookup(chan: dict[str, str], test: str) -> str | None:
    """``test``'s recorded status, by its exact node id. Some parsers key a line with its
    reason (``x - why``) or cut it at a space inside its parameters: then the record whose id
    the key starts with, never one whose name part is not an identifier; a key cut from
    several node ids (``t.py::f[a`` from ``t.py::f[a b]`` and ``t.py::f[a c]``) passes only when
    every one of them passed, else it has the status of the first that did not."""
    if test in chan:
        return chan[test]
    stems = [
        c
        for c in chan
        if test.startswith(c + " ")
        and all(p.isidentifier() for p in c.split("[", 1)[0].split("::")[1:])
    ]
    if stems:
        return chan[max(stems, key=len)]
    if test.count("[") <= test.count("]"):  # not cut inside its parameters
        return None
    cut = sorted(c for c in chan if c.startswith(test + " "))
    worse = [chan[c] for c in cut if chan[c] not in PASSING]
    found = worse or [chan[c] for c in cut]
    return found[0] if found else None


def node_id_form(test: str) -> bool:
    """Whether a test file can define ``test``: ``path::name`` with a path of no spaces or
    brackets. swebench's parsers also key lines that no node id makes (``[100%]`` and ``[``
    from an inner pytest's progress, in pytest's own repository); published rows list them."""
    path, sep, name = test.partition("::")
    return bool(sep and path and name) and not any(c.isspace() or c in "[]" for c in path)


def log_only(tests: list[str]) -> list[str]:
    """The task's tests that no test file can define (``node_id_form``): no record can back
    them, and they stand for no test, so forging their log line gains nothing. The ``official``
    rule judges them on the log, as swebench does; the ``rl`` rule leaves them out (a row whose
    FAIL_TO_PASS holds only such ids has nothing to fix: ``no_fail_to_pass``)."""
    return [t for t in tests if not node_id_form(t)]


def compare(log: dict[str, str], chan: dict[str, str], tests: list[str]) -> list[str]:
    """The task's tests the log shows passing that the records do not show passing (the
    ``log_only`` ones, which no record can back, left out)."""
    return [
        t
        for t in tests
        if log.get(t) in PASSING and node_id_form(t) and _lookup(chan, t) not in PASSING
    ]
