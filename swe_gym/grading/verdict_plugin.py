"""The grader's pytest plugin: each test's outcome, recorded by trusted code beside the log.

Shipped into the grading sandbox as a file and loaded through ``PYTEST_PLUGINS`` before any
code of the patch is imported (it is never imported by the toolkit itself). It runs under the
task environment's own Python and pytest, so it keeps to old syntax and old hook forms.

At import it takes and removes its inputs from the environment (the record file, the file
holding the run's key, which it deletes, the plugins the environment declared, and the
variables the grader set for it), so nothing the tests start later sees them. Entry-point plugins are loaded here, and only those
the environment declared before the patch was applied (auto-loading is off for the run).

At its import, before anything of the patch is imported, it reads the task's test files and
installs the runtime guard (``swe_gym_guard``, from ``guard.py``), which holds the key and writes
every record: the plugin only raises them through ``_emit``.

Each record is a JSON line with an HMAC-SHA256 under the per-run key and a sequence number:
``start``, one ``own`` per test phase (the outcome read from the phase's exception, not from
the report object, which patched code can rewrite), one ``rep`` per report as pytest logged it,
``tamper`` for each finding of the guard, and ``end`` with the exit status when the session
finishes. A run that dies early (``os._exit``) has no ``end``. See ``swe_gym.grading.verdict``.
"""

import json
import os
import sys

import pytest


def _emit(*record):
    """Every record goes through here: the guard's audit hook writes it only when called from
    this function's code with no untrusted code on the stack (see ``swe_gym_guard``)."""
    if _FALLBACK is not None:  # no audit hooks (Python < 3.8): written directly, unguarded
        if record[0] == "own":
            record = ("own", record[1].nodeid) + tuple(record[2:])
        if record[0] not in ("watch", "begin", "finish"):
            _FALLBACK(*record)
        return
    if _ON:
        sys.audit("swe_gym.verdict", *record)


def _start():
    """Take the inputs out of the environment, read the test files' bytes, install the guard.
    Returns (on, fallback writer)."""
    keyfile = os.environ.pop("SWE_GYM_VERDICT_KEYFILE", "")
    path = os.environ.pop("SWE_GYM_VERDICT_PATH", "")
    guard_file = os.environ.pop("SWE_GYM_VERDICT_GUARD", "")
    if not keyfile or not path:
        return False, None  # a pytest started by the tests: nothing to record
    with open(keyfile, "rb") as f:
        key = f.read().strip()
    os.unlink(keyfile)
    config = {}
    if guard_file:
        with open(guard_file, "rb") as f:
            config = json.loads(f.read().decode("utf-8", "surrogateescape"))
    root = config.get("root") or os.getcwd()
    sources = {}
    for rel in config.get("tests", []):
        full = os.path.realpath(os.path.join(root, rel))
        try:
            with open(full, "rb") as f:
                sources[full] = f.read()
        except OSError:
            continue
    import swe_gym_guard

    fallback = swe_gym_guard.install(config, key, path, _emit.__code__, sources)
    return True, fallback


_ALLOWED = json.loads(os.environ.pop("SWE_GYM_VERDICT_PLUGINS", "[]") or "[]")
for _name in ("PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTHONPATH"):
    _old = os.environ.pop("SWE_GYM_VERDICT_OLD_" + _name, None)
    if _old is None or _old == "__swe_gym_unset__":  # it was not set before the grader's run
        os.environ.pop(_name, None)
    else:
        os.environ[_name] = _old
_SKIP = pytest.skip.Exception
_XFAIL = getattr(pytest.xfail, "Exception", None)


def _entry_points():
    """(name, value, load) of every ``pytest11`` entry point; a broken distribution on the
    path (no metadata) is passed over, not fatal."""
    try:
        from importlib.metadata import distributions
    except ImportError:  # Python < 3.8
        import pkg_resources

        eps = pkg_resources.iter_entry_points("pytest11")
        return [(ep.name, ep.module_name, ep.load) for ep in eps]
    out = []
    for dist in distributions():
        try:
            for ep in dist.entry_points:
                if ep.group == "pytest11":
                    out.append((ep.name, ep.value, ep.load))
        except Exception:
            continue
    return out


def pytest_addhooks(pluginmanager):
    """Load the declared entry-point plugins as auto-loading would. Called when this plugin is
    registered (a historic hook, in every pytest since 2.8; ``pytest_addoption`` takes the
    plugin manager only from pytest 5.4 on)."""
    allowed = set(tuple(p) for p in _ALLOWED)
    loaded = []
    for name, value, load in _entry_points():
        if (name, value.split(":")[0].strip()) not in allowed:
            continue
        if pluginmanager.get_plugin(name) is not None or pluginmanager.is_blocked(name):
            continue
        plugin = load()
        if pluginmanager.is_registered(plugin):
            continue
        pluginmanager.register(plugin, name)
        loaded.append(name)
    _emit("start", sorted(loaded))


def _own(call):
    ei = call.excinfo
    if ei is None:
        return "passed"
    if _XFAIL is not None and ei.errisinstance(_XFAIL):
        return "xfailed"
    if ei.errisinstance(_SKIP):
        return "skipped"
    return "failed"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    _emit("begin", item)
    yield
    _emit("finish", item)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    own = _own(call)
    yield
    _emit("own", item, call.when, own)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    _emit(
        "rep",
        report.nodeid,
        report.when,
        report.outcome,
        bool(getattr(report, "wasxfail", None) is not None),
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    _emit("watch", session)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _emit("end", int(exitstatus))


# Last, so that the guard's snapshot holds this module's hooks; still before pytest goes on
# (nothing of the patch has been imported yet).
_ON, _FALLBACK = _start()
