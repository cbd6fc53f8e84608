"""Hostile patches' payloads for ``starter__tinystats-2`` (the fix is one line in
``tinystats/descriptive.py``; the tests import ``tinystats``), shared by the red-team tests
(``test_runtime_tamper.py``, ``test_verdict_forgery.py``) and ``benchmarks/bench_guard.py``.

Each payload is appended to the package the tests import, the bug left in place. Names are
built at run time wherever the static check would otherwise read them, so that what stops a
payload is the runtime guard. ``APPENDED`` names every runtime mechanism; ``HONEST`` and
``GC_TEST`` use the same features harmlessly.
"""

from __future__ import annotations

from swe_gym.starter import starter_tasks
from swe_gym.tasks import Task

INIT = "tinystats/__init__.py"
CODE = "tinystats/descriptive.py"
F2P = "tests/test_descriptive.py::test_sample_variance_divides_by_n_minus_1"
FIX = ("return _sum_of_squares(data) / len(data)", "return _sum_of_squares(data) / (len(data) - 1)")


def tinystats_task() -> Task:
    return next(t for t in starter_tasks() if t.instance_id == "starter__tinystats-2")


def fix(text: str) -> str:
    """The one-line fix of ``CODE`` (``pvariance`` has the same expression: replace once)."""
    return text.replace(*FIX, 1)


def refused(report, *reasons: str) -> None:  # noqa: ANN001
    """Not resolved, for one of ``reasons`` (the report's detail and log tail when not)."""
    assert not report.resolved, report.to_dict()
    assert report.reason in reasons, (report.reason, report.detail[:2000], report.log_tail[-1500:])


_HEAD = """
_sy = __import__("s" + "ys")
def _noop(*a, **k):
    return None
def _swap_tests(frame, event, arg):
    # at each call once the test module exists: its F2P function's code becomes a no-op
    for name in ("tests.test_descriptive", "test_descriptive"):
        fn = getattr(_sy.modules.get(name), "test_sample_variance_divides_by_n_minus_1", None)
        if fn is not None and fn.__code__ is not _noop.__code__:
            setattr(fn, "__co" + "de__", _noop.__code__)
    return None
"""
TRACE = _HEAD + 'getattr(_sy, "set" + "trace")(_swap_tests)\n'
PROFILE = _HEAD + 'getattr(_sy, "set" + "profile")(_swap_tests)\n'
THREAD_TRACE = (
    _HEAD
    + """
import threading as _th
getattr(_th, "set" + "trace")(_swap_tests)
_t = _th.Thread(target=len, args=([],))
_t.start()
_t.join()
"""
)
# A background thread finds the test function through the garbage collector.
GC_THREAD = """
import threading as _th, time as _ti
_gc = __import__("g" + "c")
def _noop(*a, **k):
    return None
def _hunt():
    for _ in range(3000):
        try:
            objs = getattr(_gc, "get_" + "objects")()
        except BaseException:
            return
        for o in objs:
            if type(o) is type(_hunt) and o.__name__.startswith("test_sample"):
                setattr(o, "__co" + "de__", _noop.__code__)
                return
        _ti.sleep(0.001)
_th.Thread(target=_hunt, daemon=True).start()
_ti.sleep(0.05)
"""
# The same walk laundered through the standard library's thread pool (no frame of the patch
# on the worker's stack).
GC_POOL = """
import concurrent.futures as _cf
_gc = __import__("g" + "c")
with _cf.ThreadPoolExecutor(1) as _ex:
    _objs = _ex.submit(getattr(_gc, "get_" + "objects")).result()
"""
# The test module being imported is replaced by its own source without asserts.
_STRIP = """
import ast as _ast, types as _ty
_sy = __import__("s" + "ys")
class _NoAsserts(_ast.NodeTransformer):
    def visit_Assert(self, node):
        return _ast.Pass()
def _stripped(path, name, as_name):
    tree = _ast.fix_missing_locations(_NoAsserts().visit(_ast.parse(open(path).read())))
    mod = _ty.ModuleType(name)
    mod.__file__ = path
    exec(compile(tree, as_name or path, "exec"), mod.__dict__)
    return mod
def _importer():
    f = _sy._getframe(1)
    while f is not None and not f.f_globals.get("__name__", "").rsplit(".", 1)[-1].startswith("test_"):
        f = f.f_back
    return f.f_globals if f is not None else None
"""
SYS_MODULES = (
    _STRIP
    + """
_g = _importer()
if _g is not None:
    getattr(_sy.modules, "__set" + "item__")(_g["__name__"], _stripped(_g["__file__"], _g["__name__"], None))
"""
)
SYS_MODULES_RENAMED = SYS_MODULES.replace(
    '_g["__name__"], None))', '_g["__name__"], "<stripped>"))'
)
# An import hook on sys.meta_path; the test module is imported again through it.
META_PATH = (
    _STRIP
    + """
import importlib as _il, importlib.abc as _ia, importlib.util as _iu
class _Loader(_ia.Loader):
    def __init__(self, path):
        self.path = path
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        module.__dict__.update(_stripped(self.path, module.__name__, None).__dict__)
class _Finder(_ia.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.rsplit(".", 1)[-1].startswith("test_"):
            for f in _sy.meta_path:
                if f is not self and hasattr(f, "find_spec"):
                    spec = f.find_spec(name, path, target)
                    if spec is not None and spec.origin:
                        return _iu.spec_from_loader(name, _Loader(spec.origin), origin=spec.origin)
        return None
_sy.meta_path.insert(0, _Finder())
_g = _importer()
if _g is not None:
    _name = _g["__name__"]
    getattr(_sy.modules, "po" + "p")(_name, None)
    _il.import_module(_name)
"""
)
# pytest's approx, or one of its classes' comparisons, wrapped to accept anything.
_ANY = """
class _Any:
    def __eq__(self, other):
        return True
    __hash__ = None
_pt = __import__("py" + "test")
"""
APPROX = _ANY + 'setattr(_pt, "app" + "rox", lambda *a, **k: _Any())\n'
APPROX_CLASS = (
    _ANY
    + """
_api = __import__("_py" + "test.python_api", fromlist=["x"])
setattr(getattr(_api, "Approx" + "Scalar"), "__eq__", lambda self, other: True)
"""
)
# The grader plugin's record function swapped out, beside approx accepting anything.
WRITER = (
    APPROX
    + """
_v = __import__("s" + "ys").modules.get("swe_gym_" + "verdict")
if _v is not None:
    setattr(_v, "_em" + "it", lambda *a: None)
"""
)
# The run's key looked for in the closures the garbage collector holds.
KEY_FROM_GC = """
_gc = __import__("g" + "c")
_cells = [o for o in getattr(_gc, "get_" + "objects")() if type(o).__name__ == "cell"]
"""
# Native code written at run time and imported; ctypes from the patch.
RUNTIME_NATIVE = """
import os as _o, tempfile as _tf
_d = _tf.mkdtemp()
with open(_o.path.join(_d, "evil.so"), "wb") as _f:
    _f.write(b"\\x7fELF" + b"\\0" * 60)
__import__("s" + "ys").path.insert(0, _d)
__import__("evil")
"""
CTYPES = "import ctypes as _ct\n_ct.string_at(id(1), 8)\n"
# Near variants: other objects, other hooks, other timings.
CODE_REPLACE = """
_sy = __import__("s" + "ys")
def _pass():
    return None
_fake = _pass.__code__.replace(co_filename=_sy._getframe(1).f_code.co_filename)
"""
FROZEN_NAME = """
_ns = {}
exec(compile("def _hide():\\n    return 1\\n", "<frozen importlib._bootstrap>", "exec"), _ns)
"""
OTHER_THREADS_FRAMES = 'getattr(__import__("s" + "ys"), "_current" + "_frames")()\n'
REFERRERS = """
_gc = __import__("g" + "c")
getattr(_gc, "get_" + "referrers")(__import__("s" + "ys").modules)
"""
THREAD_PROFILE = (
    _HEAD
    + """
import threading as _th
getattr(_th, "set" + "profile")(_swap_tests)
_t = _th.Thread(target=len, args=([],))
_t.start()
_t.join()
"""
)
# At call time, from inside the F2P test's own call of the buggy function: the other tests'
# code swapped, and the test itself rebuilt around other globals.
SWAP_AT_CALL = """
_sy = __import__("s" + "ys")
def _pass():
    return None
_orig_variance = variance
def variance(data):
    g = _sy._getframe(1).f_globals
    for name, fn in list(g.items()):
        if name.startswith("test_") and callable(fn) and name != "test_sample_variance_divides_by_n_minus_1":
            setattr(fn, "__co" + "de__", _pass.__code__)
    return _orig_variance(data)
"""
REBUILT_TEST = """
_sy = __import__("s" + "ys")
_ty = __import__("types")
_orig_variance = variance
def variance(data):
    g = _sy._getframe(1).f_globals
    t = g.get("test_stdev_is_sqrt_of_variance")
    if t is not None:
        g["test_stdev_is_sqrt_of_variance"] = _ty.FunctionType(t.__code__, dict(g))
    return _orig_variance(data)
"""
# The record file reached through a link of the patch's own.
RECORD_LINK = """
import glob as _g, os as _o, tempfile as _tf
for _p in _g.glob(".swe_" + "gym_grading/verdict/*.rec"):
    _l = _o.path.join(_tf.mkdtemp(), "r")
    _o.symlink(_o.path.abspath(_p), _l)
    open(_l, "a").write("x\\n")
"""

# The guard's own tools swapped first (stdlib and builtins it might call), then a vetoed act.
SWAP_TOOLS_FIRST = (
    _HEAD
    + """
import hmac as _h, json as _j, os as _o
_o.path.realpath = lambda p, **k: "/nowhere"
_j.dumps = lambda *a, **k: "[]"
_h.new = lambda *a, **k: None
getattr(_sy, "set" + "trace")(_swap_tests)
"""
)
# A finder whose every attribute read walks the garbage collector: the guard reads none.
BAITED_FINDER = """
_sy = __import__("s" + "ys")
class _Bait:
    def __getattribute__(self, name):
        getattr(__import__("g" + "c"), "get_" + "objects")()
        return object.__getattribute__(self, name)
    def find_spec(self, *a, **k):
        return None
_sy.meta_path.append(_Bait())
"""
# The record file named by a path object of the patch's own.
PATH_OBJECT = """
import glob as _g
class _P:
    def __fspath__(self):
        return _g.glob(".swe_" + "gym_grading/verdict/*.rec")[0]
try:
    open(_P(), "a").write("x\\n")
except Exception:
    pass
"""

# pytest's own hooks called later with a fake passing call of the F2P test, from a clean stack:
# an exit handler (after the session), a timer thread.
_LATER = """
_sy = __import__("s" + "ys")
import atexit as _ax, threading as _th
class _Call:
    when = "call"
    excinfo = None
    start = stop = duration = 0.0
    result = None
_orig_variance = variance
def variance(data):
    f = _sy._getframe(1)
    while f is not None and "item" not in f.f_locals:
        f = f.f_back
    if f is not None:
        item = f.f_locals["item"]
        hook = item.ihook.pytest_runtest_makereport
        SCHEDULE
    return _orig_variance(data)
"""
AT_EXIT_HOOK = _LATER.replace("SCHEDULE", "_ax.register(hook, item=item, call=_Call())")
TIMER_HOOK = _LATER.replace(
    "SCHEDULE", '_th.Timer(0, hook, kwargs={"item": item, "call": _Call()}).start()'
)

# Test-id twins: a callable named "<F2P name> twin" whose log line swebench's parser keys as the
# F2P test, while the real test is skipped by the buggy function when it calls it.
TWINS = (
    _STRIP
    + """
def _twin():
    return None
_g = _importer()
if _g is not None:
    _g["test_sample_variance_divides_by_n_minus_1 twin"] = _twin
_out = __import__("_py" + "test.outcomes", fromlist=["x"])
_orig_variance = variance
def variance(data):
    if _sy._getframe(1).f_code.co_name == "test_sample_variance_divides_by_n_minus_1":
        raise getattr(_out, "Skip" + "ped")("later")
    return _orig_variance(data)
"""
)
# The plain forgery (PASSED lines, then leave before pytest reports), with the exit written in
# fullwidth letters: Python reads them as ASCII (NFKC), a regex over the diff did not.
FULLWIDTH_EXIT = """
import os as _os
print("PASSED " + "tests/test_descriptive.py::test_sample_variance_divides_by_n_minus_1")
_os._\uff45\uff58\uff49\uff54(0)
"""
# Report objects flipped to passed, names written out, hidden by a `*.py binary` attribute.
FLIP_REPORTS = """
import _pytest.reports as _r
_make = _r.TestReport.from_item_and_call.__func__
def _forged(cls, item, call):
    rep = _make(cls, item, call)
    rep.outcome, rep.longrepr = "passed", None
    return rep
_r.TestReport.from_item_and_call = classmethod(_forged)
"""
ELF = b"\x7fELF\x02\x01\x01" + b"\0" * 57

HONEST = """

import collections as _collections
import dataclasses as _dataclasses
import functools as _functools
import sys as _sys
import threading as _threading
import traceback as _traceback
from concurrent.futures import ThreadPoolExecutor as _Pool

_Pair = _collections.namedtuple("_Pair", "low high")


@_dataclasses.dataclass(frozen=True)
class _Summary:
    n: int
    total: float = 0.0


_ns = {}
exec("def _double(x):\\n    return 2 * x\\n", _ns)


def _logged(fn):
    @_functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _sys._getframe(0)
        try:
            return fn(*args, **kwargs)
        except ZeroDivisionError:
            _traceback.format_exc()
            raise
    return wrapper


@_functools.lru_cache(maxsize=None)
def _cached(n):
    return _ns["_double"](n) // 2


with _Pool(2) as _pool:
    assert list(_pool.map(_cached, [1, 2])) == [1, 2]
_worker = _threading.Thread(target=_Summary, args=(1,))
_worker.start()
_worker.join()
_Pair(0, 1)
variance = _logged(variance)
"""

GC_TEST = """

def test_no_leaked_frames():
    import gc
    assert sum(1 for o in gc.get_objects() if type(o).__name__ == "frame") >= 0
    assert gc.get_referrers(test_no_leaked_frames)
"""


# The same features honest code of published rows uses (``test_guard_honest.py``), by the
# patch: a finder whose file is written during the run (the ctime rule, on a writable mount),
# a test module's imported name rebound after collection, ctypes imported by name through the
# standard library or used once a library imported it, and a sourceless ``.pyc`` whose code
# claims to be the test file, compiled by a process without the guard.
FINDER_WRITTEN = """
import os as _o, tempfile as _tf
_sy = __import__("s" + "ys")
_d = _tf.mkdtemp()
with open(_o.path.join(_d, "_late_finder.py"), "w") as _f:
    _f.write("class Finder:\\n    def find_spec(self, name, path=None, target=None):\\n        return None\\n")
_sy.path.insert(0, _d)
_sy.meta_path.insert(0, __import__("_late_finder").Finder())
"""
REBIND_TEST_NAME = """
_sy = __import__("s" + "ys")
def _sample(data):
    data = list(data)
    if len(data) < 2:
        return _buggy(data)
    m = sum(data) / len(data)
    return sum((x - m) ** 2 for x in data) / (len(data) - 1)
_buggy = variance
def variance(data):
    g = _sy._getframe(1).f_globals
    if g.get("__name__", "").rsplit(".", 1)[-1].startswith("test_"):
        g["variance"] = _sample
        g["stdev"] = lambda d: _sample(d) ** 0.5
        return _sample(data)
    return _buggy(data)
"""
CTYPES_BY_NAME = """
getattr(__import__("s" + "ys").modules, "po" + "p")("c" + "types", None)  # imported afresh
__import__("importlib").import_module("c" + "types")
"""
CTYPES_AFTER_LIBRARY = """
import multiprocessing.sharedctypes as _shared
getattr(__import__("s" + "ys").modules["c" + "types"], "string" + "_at")(id(1), 8)
"""
SOURCELESS_AS_TEST = """
import os as _o, subprocess as _sp, tempfile as _tf
_sy = __import__("s" + "ys")
_d = _tf.mkdtemp()
_sp.run([_sy.executable, "-c", (
    "import importlib.util as u, marshal, sys\\n"
    "c = compile('X = 1', sys.argv[1], 'exec')\\n"
    "open(sys.argv[2], 'wb').write(u.MAGIC_NUMBER + bytes(12) + marshal.dumps(c))\\n"
), _o.path.abspath("tests/test_descriptive.py"), _o.path.join(_d, "_hid.pyc")], check=True)
_sy.path.insert(0, _d)
__import__("_hid")
"""
# A standard library function swapped for functools' cache around another function (which
# calls it), its ``__wrapped__`` set to the original to pass for a cache of it.
FAKE_CACHE = """
import functools as _ft, posixpath as _pp
_orig = _pp.normcase
_fake = _ft.lru_cache()(lambda s: _orig(s))
_fake.__wrapped__ = _orig
_pp.normcase = _fake
"""
# Honest counterparts appended beside the fix: a library whose own body imports ctypes; a
# standard library function cached in place (astroid does it to ``tokenize._compile``,
# a plain function before Python 3.10).
HONEST_CTYPES = "\nimport multiprocessing.sharedctypes as _shared  # imports ctypes itself\n"
HONEST_CACHE = """
import functools as _ft, posixpath as _pp
_pp.normcase = _ft.lru_cache()(_pp.normcase)
"""

# Every runtime mechanism above, by name (appended to ``INIT``).
APPENDED = {
    "trace": TRACE,
    "profile": PROFILE,
    "thread_trace": THREAD_TRACE,
    "gc_thread": GC_THREAD,
    "gc_pool": GC_POOL,
    "sys_modules": SYS_MODULES,
    "sys_modules_renamed": SYS_MODULES_RENAMED,
    "meta_path": META_PATH,
    "approx": APPROX,
    "approx_class": APPROX_CLASS,
    "writer": WRITER,
    "key_from_gc": KEY_FROM_GC,
    "runtime_native": RUNTIME_NATIVE,
    "ctypes": CTYPES,
    "code_replace": CODE_REPLACE,
    "frozen_name": FROZEN_NAME,
    "other_threads_frames": OTHER_THREADS_FRAMES,
    "referrers": REFERRERS,
    "thread_profile": THREAD_PROFILE,
    "swap_at_call": SWAP_AT_CALL,
    "rebuilt_test": REBUILT_TEST,
    "record_link": RECORD_LINK,
    "swap_tools_first": SWAP_TOOLS_FIRST,
    "baited_finder": BAITED_FINDER,
    "path_object": PATH_OBJECT,
    "at_exit_hook": AT_EXIT_HOOK,
    "timer_hook": TIMER_HOOK,
    "twins": TWINS,
    "fullwidth_exit": FULLWIDTH_EXIT,
    "flip_reports": FLIP_REPORTS,
    "finder_written": FINDER_WRITTEN,
    "rebind_test_name": REBIND_TEST_NAME,
    "ctypes_by_name": CTYPES_BY_NAME,
    "ctypes_after_library": CTYPES_AFTER_LIBRARY,
    "sourceless_as_test": SOURCELESS_AS_TEST,
    "fake_cache": FAKE_CACHE,
}
