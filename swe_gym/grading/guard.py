"""The runtime guard of the test process: an audit hook (PEP 578) the patched code cannot remove.

Shipped beside ``verdict_plugin.py`` as ``swe_gym_guard`` and installed by the plugin at its
import, before any code of the patch runs (never imported by the toolkit itself; it keeps to
old syntax). Everything it uses is bound inside ``install`` when it starts: C functions and the
hook's closure, never a module attribute that code of the patch could swap later.

**Records.** The hook owns the record file and the run's key. The plugin raises a
``swe_gym.verdict`` event from its ``emit`` function; the hook writes the record only when the
caller is that function's code with no untrusted frame on the stack, and runs the integrity
checks (``_checks``) before writing each test phase of the watched tests and at session end.
Nothing reachable from Python objects holds the key but the hook's closure, and reaching that
takes ``gc`` or ``ctypes`` (vetoed below).

**Attribution.** A frame is *untrusted* when its code's file is one the patch added or changed,
a file changed after the guard started (ctime; never on a read-only mount: ``guard_io``), or a
name registered as made by untrusted code (code compiled or built while untrusted code was on
the stack, under a name that is not an import of that file's own bytes). Making code named as a
test file, the runner's or the grader's files with untrusted code on the stack is tampering.
The runner's own modules, when the tree holds the runner (pytest's repository), are the
runner's even where the patch edited them; a ``runner`` record names those (SECURITY.md).

**Events** (``guard_events``). With untrusted code on the stack (or in a thread whose target
is untrusted): tracing and profiling hooks, ``sys.monitoring`` callbacks, ``gc`` object walks,
other threads' frames, ``ctypes`` memory and symbol access and importing ``ctypes`` (but for a
trusted module's body doing it for itself), assigning a function's code or defaults outside the
patched files, unmarshalling code, and opening the grader's files are vetoed (the operation
raises) and recorded (``tamper``); so is loading native code written after the start, whoever
asks. The verdict is then ``tampered`` (``verdict.py``). The files and the record writer are
``guard_io``'s, the integrity checks ``guard_checks``'; each runs from a private copy.
"""

import sys


class Tampered(RuntimeError):
    """Raised inside the audited operation: the operation does not happen."""


class _Probe:
    def m(self):
        return None


def install(config, key, path, emit_code, trusted_sources):
    """Open the record file and install the audit hook. Returns ``write`` on Pythons without
    audit hooks (3.6, 3.7) or when ``config["hook"]`` is False (the benchmark's baseline):
    records are then written directly, unguarded. Else None.

    The guard's code runs from a private copy of this module: its globals, builtins included,
    are a copy taken now, so a later ``builtins.list = ...`` or a swap of this module's names
    does not reach it."""
    import builtins
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    spaces = []
    files = ("checks", "events", "io")
    for name in ["swe_gym_guard_%s.py" % n for n in files] + [os.path.basename(__file__)]:
        with open(os.path.join(here, name), "rb") as f:
            source = f.read()
        space = {"__builtins__": dict(vars(builtins)), "__name__": "swe_gym_private"}
        exec(compile(source, os.path.join(here, name), "exec"), space)
        spaces.append(space)
    checks, events, io, guard = spaces
    makers = (checks["_checks"], events["_events"], io["_io"])
    return guard["_install"](config, key, path, emit_code, trusted_sources, makers)


def _install(config, key, path, emit_code, trusted_sources, makers):
    import _thread
    import builtins
    import os
    import threading

    try:
        from _hashlib import hmac_digest
    except ImportError:  # Python < 3.7 (and no audit hooks there either)
        import hmac as _hmac

        def hmac_digest(k, m, d):
            return _hmac.new(k, m, d).digest()

    # Bound now: code of the patch may later swap any module attribute, not these references.
    b_getattr, b_isinstance, b_len, b_str, b_bytes = getattr, isinstance, len, str, bytes
    b_int, b_type, b_any, b_vars, b_id = int, type, any, vars, id
    o_getcwd = os.getcwd
    getframe, get_ident = sys._getframe, _thread.get_ident
    # Safe looks at objects the patch may have made: descriptors of the built-in types, so no
    # ``__getattr__``, property or metaclass of the patch's runs inside the hook.
    function_type = b_type(_install)
    method_type = b_type(_Probe().m)
    builtin_types = (b_type(len), b_type([].append), b_type(object.__init__), b_type(str.join))
    type_mro = type.__dict__["__mro__"].__get__
    type_dict = type.__dict__["__dict__"].__get__
    type_flags = type.__dict__["__flags__"].__get__
    type_name = type.__dict__["__name__"].__get__
    func_dict = function_type.__dict__["__dict__"].__get__
    mod_dict = b_type(sys).__dict__["__dict__"].__get__
    o_repr = object.__repr__
    sys_dict = mod_dict(sys)
    threading_dict = mod_dict(threading)
    gettrace, getprofile = sys.gettrace, sys.getprofile
    current_frames = sys._current_frames
    modules = sys.modules
    main_ident = get_ident()
    lock = _thread.RLock()
    busy = _thread._local()

    make_checks, make_events, make_io = makers
    io = make_io(key, path, hmac_digest, lock)
    resolve, written_after, same_bytes = io["resolve"], io["written_after"], io["same_bytes"]
    write, flush = io["write"], io["flush"]

    def is_type(obj):
        return bool(type_flags(b_type(obj)) & (1 << 31))

    def describe(obj):
        """What ``obj`` is, without running any code of its own (no ``__repr__``)."""
        if b_type(obj) is function_type:
            return "function %s (%s)" % (obj.__code__.co_name, obj.__code__.co_filename)
        if is_type(obj):
            return "class %s" % (type_name(obj),)
        return o_repr(obj)

    root = resolve(config.get("root") or o_getcwd())
    grader_dir = resolve(path.rsplit("/", 1)[0])
    patched = set(resolve(root + "/" + p) for p in config.get("patched", []))
    tests = set(resolve(root + "/" + p) for p in config.get("tests", []))
    watched = set(config.get("watched", []))
    runner_dirs, runner_tree = [], []
    for name in ("_pytest", "pytest", "pluggy", "py"):
        f = b_getattr(modules.get(name), "__file__", None)
        if f:
            d = resolve(f.rsplit("/", 1)[0] if f.endswith("__init__.py") else f)
            if d and d.startswith(root + "/"):  # a runner under test is not protected
                runner_tree.append(d)
            elif d:
                runner_dirs.append(d)
    # The runner's own modules the patch changed (pytest's repository, installed from the
    # tree): they are the runner, on every stack the runner makes, as an installed pytest is;
    # nothing they do is the patch's (SECURITY.md). The report names them.
    runner_files = set(
        p for p in patched if b_any(p == d or p.startswith(d + "/") for d in runner_tree)
    )
    patched = patched - runner_files

    names = {}  # filename -> untrusted? (cache)
    made = set()  # names of code made while untrusted code ran
    seen = set()  # tamper texts already written

    def untrusted_file(name):
        if b_type(name) is not b_str:
            return True
        hit = names.get(name)
        if hit is not None:
            return hit
        if name in made:
            hit = True
        elif name.startswith("<"):
            hit = False
        else:
            real = resolve(name)
            hit = real is None or real in patched or written_after(real)
        names[name] = hit
        return hit

    def protected(name):
        if not b_isinstance(name, b_str):
            return False
        if name.startswith("<frozen"):
            return True
        real = resolve(name)
        if real is None:
            return False
        if real in tests or (grader_dir and real.startswith(grader_dir + "/")):
            return True
        return b_any(real == d or real.startswith(d + "/") for d in runner_dirs)

    names_get = names.get

    def culprit(frame):
        """The first untrusted frame's file on ``frame``'s stack, else None."""
        while frame is not None:
            name = frame.f_code.co_filename
            hit = names_get(name) if b_type(name) is b_str else True
            if hit is None:
                hit = untrusted_file(name)
            if hit:
                return name
            frame = frame.f_back
        return None

    def trusted_callable(obj):
        """Whether ``obj``'s code (a function, a bound method, a callable object's or finder's
        class and its bases) comes from trusted files; C callables are trusted. Reads only
        built-in descriptors: nothing of ``obj``'s own runs."""
        for _ in range(8):
            t = b_type(obj)
            if t is function_type:
                return not untrusted_file(obj.__code__.co_filename)
            if t is method_type or t is classmethod or t is staticmethod:
                obj = obj.__func__
                continue
            for c in builtin_types:
                if t is c:
                    return True
            break
        cls = obj if is_type(obj) else b_type(obj)
        for klass in type_mro(cls):
            for meth in type_dict(klass).values():
                t = b_type(meth)
                if t is classmethod or t is staticmethod:
                    meth = meth.__func__
                    t = b_type(meth)
                if t is property:
                    fns = (meth.fget, meth.fset, meth.fdel)
                else:
                    fns = (meth,)
                for fn in fns:
                    if b_type(fn) is function_type and untrusted_file(fn.__code__.co_filename):
                        return False
        return True

    def tamper(kind, detail, veto=True):
        text = "%s: %s" % (kind, detail)
        if text not in seen and b_len(seen) < 200:
            seen.add(text)
            write("tamper", kind, text[:600])
        if veto:
            raise Tampered("the grader refused this operation (%s)" % kind)

    checks = make_checks(
        config=config,
        trusted_sources=trusted_sources,
        tamper=tamper,
        untrusted_file=untrusted_file,
        trusted_callable=trusted_callable,
        from_imports=io["from_imports"],
        resolve=resolve,
        tests=tests,
        root=root,
        prims=(b_getattr, b_vars, b_id, b_isinstance, b_type, b_len),
        sysv=(modules, gettrace, getprofile, current_frames),
        safe={
            "describe": describe,
            "is_type": is_type,
            "function_type": function_type,
            "method_type": method_type,
            "func_dict": func_dict,
            "mod_dict": mod_dict,
            "type_name": type_name,
            "type_mro": type_mro,
            "sys_dict": sys_dict,
            "threading_dict": threading_dict,
        },
    )

    run = {"current": None, "collected": None, "ended": False}

    def on_record(event, args, frame):
        """A record from the plugin's ``emit``, raised by pytest's own calls (no untrusted
        frame below, the main thread, before the session's end). A test's outcome is taken
        only while pytest runs that test (``begin`` .. ``finish``), and only for a test that
        was collected: an outcome raised later by a callback of the patch's (a finalizer, an
        exit handler calling pytest's hooks) is refused."""
        kind = args[0]
        if frame is None or frame.f_code is not emit_code:
            tamper("forged record", "%s from %s" % (kind, culprit(frame)))
        # begin and finish write nothing: a forged one can only make a real outcome refused
        if kind not in ("begin", "finish") and culprit(frame.f_back) is not None:
            tamper("forged record", "%s from %s" % (kind, culprit(frame)))
        if get_ident() != main_ident:
            tamper("forged record", "%s from another thread" % kind)
        if run["ended"]:
            tamper("forged record", "%s after the session ended" % kind)
        if kind == "watch":
            run["collected"] = set(b_id(i) for i in args[1].items)
            checks["watch"](args[1])
            return
        if kind == "begin":
            item = args[1]
            if run["current"] is not None:
                tamper("forged record", "%s began inside another test" % item.nodeid)
            if run["collected"] is not None and b_id(item) not in run["collected"]:
                tamper("forged record", "%s ran without being collected" % item.nodeid)
            run["current"] = item
            return
        if kind == "finish":
            run["current"] = None
            flush()
            return
        if kind == "own":
            item = args[1]
            nodeid = item.nodeid
            if run["collected"] is not None and item is not run["current"]:
                tamper("forged record", "an outcome of %s while it was not running" % nodeid)
            if nodeid in watched or not watched:
                checks["phase"](item, args[2])
            write("own", nodeid, args[2], args[3])
            return
        if kind == "end":
            checks["all"]()
            write(*args)
            run["ended"] = True
            return
        write(*args)

    handlers = make_events(
        {
            "types": (b_type, b_len, b_str, b_bytes, b_int),
            "tamper": tamper,
            "culprit": culprit,
            "untrusted_file": untrusted_file,
            "trusted_callable": trusted_callable,
            "resolve": resolve,
            "written_after": written_after,
            "same_bytes": same_bytes,
            "protected": protected,
            "describe": describe,
            "is_type": is_type,
            "patched": patched,
            "tests": tests,
            "made": made,
            "names": names,
            "get_ident": get_ident,
            "main_ident": main_ident,
            "threading_dict": threading_dict,
            "function_type": function_type,
            "code_type": b_type(_install.__code__),
            "grader_dir": grader_dir,
            "stdlib": resolve(threading.__file__.rsplit("/", 1)[0]),
            "checks": checks,
        }
    )
    handlers["swe_gym.verdict"] = on_record
    handlers_get = handlers.get
    here = _install.__code__.co_filename.rsplit("/", 1)[0]
    own_files = set(here + "/swe_gym_guard%s.py" % n for n in ("", "_io", "_events"))

    def hook(event, args):
        """Events the guard's own code raises while it works are passed over; any other code
        that runs meanwhile (a ``__getattr__`` of the patch's reached by a check) is judged
        like any code."""
        handler = handlers_get(event)
        if handler is None:
            return
        frame = getframe(1)
        was = b_getattr(busy, "on", False)
        if was and frame is not None and frame.f_code.co_filename in own_files:
            return
        busy.on = True
        try:
            handler(event, args, frame)
        finally:
            busy.on = was

    if runner_files:  # the report names them: the guard does not stand apart from the runner
        write("runner", sorted(p[b_len(root) + 1 :] for p in runner_files))
    del builtins
    if not hasattr(sys, "addaudithook") or config.get("hook") is False:
        return write
    sys.addaudithook(hook)
    return None
