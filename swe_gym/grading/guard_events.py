"""The runtime guard's audit-event handlers, shipped beside it as ``swe_gym_guard_events``.

Run from a private copy of this module (its own globals and a copy of the builtins), like the
guard (``guard.py``), with the hook's bound primitives and attribution passed in; ``_events``
returns the handler of each audited event but the records' own (``swe_gym.verdict``).

Who asks is read from the stack: ``culprit`` is the first untrusted frame. ``ctypes`` (its
import, its libraries loaded, its symbols and memory) is judged by its user (``ctypes_user``):
the first frame past the import machinery and ``ctypes``' own package. The body of a trusted
module uses it for itself, whoever imported that module (numpy's, imported by a patched file,
imports ``ctypes``, whose own body loads the C library); anywhere else the whole stack counts.
"""


def _events(g):
    """The handlers, closed over the guard's state ``g`` (see ``guard._install``)."""
    b_type, b_len, b_str, b_bytes, b_int = g["types"]
    b_isinstance = isinstance
    tamper, culprit = g["tamper"], g["culprit"]
    untrusted_file, trusted_callable = g["untrusted_file"], g["trusted_callable"]
    resolve, written_after, same_bytes = g["resolve"], g["written_after"], g["same_bytes"]
    protected, describe, is_type = g["protected"], g["describe"], g["is_type"]
    patched, tests, made, names = g["patched"], g["tests"], g["made"], g["names"]
    get_ident, main_ident, threading_dict = g["get_ident"], g["main_ident"], g["threading_dict"]
    function_type, code_type, grader_dir = g["function_type"], g["code_type"], g["grader_dir"]
    stdlib = g["stdlib"]
    checks = g["checks"]

    def strict(event, args, frame):
        who = culprit(frame)
        if who is None and get_ident() != main_ident and not event.startswith("sys.monitoring"):
            who = "another thread"  # a pool thread runs what the patch handed it, frame-less
        if who is not None:
            tamper(event, "from %s" % who)

    def on_trace(event, args, frame):
        if get_ident() == main_ident:
            strict(event, args, frame)
        else:  # threading installs its hook in each new thread: the hook is what counts
            who = culprit(frame)
            if who is not None:
                tamper(event, "from %s" % who)
        hook = threading_dict.get("_trace_hook" if event == "sys.settrace" else "_profile_hook")
        if hook is not None and get_ident() != main_ident and not trusted_callable(hook):
            tamper(event, "threading hook %s" % describe(hook))

    def on_setattr(event, args, frame):
        obj, attr = args[0], args[1]
        if b_type(obj) is not function_type or b_type(attr) is not b_str:
            return
        if attr not in ("__code__", "__defaults__", "__kwdefaults__"):
            return
        target = obj.__code__.co_filename
        if protected(target):
            tamper("function." + attr, "of %s" % describe(obj))
        who = culprit(frame)
        if who is not None and not untrusted_file(target):
            tamper("function." + attr, "of %s from %s" % (describe(obj), who))

    def on_made(name, source, frame, from_loader):
        genuine = from_loader and same_bytes(name, source)
        if genuine:
            return
        if protected(name):
            tamper("code made as %s" % (name,), "from %s" % culprit(frame))
        made.add(name)
        names.pop(name, None)

    def on_compile(event, args, frame):
        if culprit(frame) is None:
            return
        name = args[1] if b_len(args) > 1 else None
        on_made(name, args[0], frame, frame.f_code.co_filename.startswith("<frozen importlib"))

    def on_code_new(event, args, frame):
        if frame is not None and frame.f_code.co_name in ("_compile_bytecode", "get_code"):
            return  # unmarshalled by the importer: on_marshal decides
        if culprit(frame) is not None:
            on_made(args[1], None, frame, False)

    resolved = {}

    def on_exec(event, args, frame):
        """Test-file code run with untrusted code on the stack is tampering; a test module's
        code run by pytest from a clean stack, its file unchanged since the start, is the code
        its tests must run (``_checks``: compared by identity)."""
        code = args[0]
        if b_type(code) is not code_type:
            return
        if pending and pending.pop(get_ident(), None) is not None:
            taint(code)
        name = code.co_filename
        if b_type(name) is not b_str:
            return
        real = resolved.get(name)
        if real is None:
            real = resolved[name] = resolve(name)
        if real not in tests:
            return
        who = culprit(frame)
        if who is not None:
            tamper(event, "of test code %s from %s" % (name, who))
        elif event == "exec" and code.co_name == "<module>" and not written_after(real):
            checks["loaded"](real, code)

    def on_marshal(event, args, frame):
        if frame is not None and frame.f_code.co_name == "_read_pyc":  # pytest's rewrite cache
            pyc, src = frame.f_locals.get("pyc"), frame.f_locals.get("source")
            if pyc is not None and written_after(resolve(b_str(pyc))):
                checks["fresh"](resolve(b_str(src)))  # not as read at the start: compile it
        who = culprit(frame)
        if who is None:
            return
        if frame is not None and frame.f_code.co_name == "_compile_bytecode":
            loc = frame.f_locals
            pyc, src = loc.get("bytecode_path"), loc.get("source_path")
            if src and pyc and not untrusted_file(src) and not written_after(resolve(pyc)):
                return
            if src and pyc:  # a cache written during this run: its source's frames untrusted
                made.add(src)
                names.pop(src, None)
                return
            if pyc and not src and imported(frame):  # a .pyc with no source, imported
                if written_after(resolve(b_str(pyc))):  # during this run: its code untrusted
                    pending[get_ident()] = pyc
                return
        tamper(event, "code unmarshalled with %s on the stack" % who)

    pending = {}  # thread -> a .pyc written during the run, whose code runs next

    def imported(frame):
        """``_compile_bytecode`` called by a loader's ``get_code`` from its ``exec_module``:
        the import system runs the code next, in this thread (``on_exec`` marks it)."""
        up = frame.f_back
        top = up.f_back if up is not None else None
        return bool(
            top is not None
            and up.f_code.co_name == "get_code"
            and top.f_code.co_name == "exec_module"
            and up.f_code.co_filename.startswith("<frozen importlib")
            and top.f_code.co_filename.startswith("<frozen importlib")
        )

    def taint(code):
        """Every file name in ``code`` (nested code included) counts as made by untrusted
        code: bytes unmarshalled from a file written during the run name any file they like."""
        stack, seen = [code], 0
        while stack and seen < 100000:
            c = stack.pop()
            seen += 1
            name = c.co_filename
            if b_type(name) is b_str and name not in made:
                if protected(name):
                    tamper("code made as %s" % (name,), "from a .pyc written during the run")
                made.add(name)
                names.pop(name, None)
            stack.extend(x for x in c.co_consts if b_type(x) is code_type)

    machinery = {}  # filename -> import machinery or ctypes' own package?

    def machinery_file(name):
        hit = machinery.get(name)
        if hit is None:
            real = resolve(name) if not name.startswith("<") else None
            hit = name.startswith("<frozen importlib") or bool(
                real
                and stdlib
                and (
                    real.startswith(stdlib + "/importlib/") or real.startswith(stdlib + "/ctypes/")
                )
            )
            machinery[name] = hit
        return hit

    def ctypes_user(frame):
        """The untrusted code that uses ``ctypes``, or None. Its user is the first frame past
        the import machinery and ``ctypes``' own package: the body of a trusted module (a file,
        not code made at run time) in the main thread uses it for itself, whoever imported
        that module; a trusted function that imports or calls by name for its caller
        (``importlib.import_module``, ``pkgutil.resolve_name``, pickle) does not, so then the
        whole stack counts (``strict``)."""
        f = frame
        while f is not None and b_type(f.f_code.co_filename) is b_str:
            if not machinery_file(f.f_code.co_filename):
                break
            f = f.f_back
        if f is not None and f.f_code.co_name == "<module>" and get_ident() == main_ident:
            name = f.f_code.co_filename
            if b_type(name) is b_str and not name.startswith("<") and not untrusted_file(name):
                return None
        return culprit(frame) or (get_ident() != main_ident and "another thread") or None

    def on_ctypes(event, args, frame):
        who = ctypes_user(frame)
        if who is not None:
            tamper(event, "from %s" % who)

    def on_import(event, args, frame):
        name = args[1] if b_len(args) > 1 else None
        if b_isinstance(name, b_str) and name.endswith((".so", ".pyd", ".dylib")):
            real = resolve(name)
            if real is None or real in patched or written_after(real):
                tamper("native import", "%s (%s)" % (args[0], name))
        elif args[0] in ("ctypes", "_ctypes"):
            who = ctypes_user(frame)
            if who is not None and who != "another thread":  # imports: the stack decides
                tamper("import ctypes", "from %s" % who)

    def on_dlopen(event, args, frame):
        name = args[0]
        if b_isinstance(name, b_str) and "/" in name:
            real = resolve(name)
            if real is None or real in patched or written_after(real):
                tamper(event, name)
        on_ctypes(event, args, frame)

    import pathlib

    path_types = tuple(
        c for c in vars(pathlib).values() if is_type(c) and c.__module__ == "pathlib"
    )

    def on_open(event, args, frame):
        name = args[0]
        t = b_type(name)
        if t is b_int or not grader_dir:
            return
        if t is b_bytes:
            name = name.decode("utf-8", "surrogateescape")
        elif t is not b_str:
            if t in path_types:
                name = b_str(name)  # pathlib's own __str__ (trusted code)
            else:  # a path-like of the patch's: its __fspath__ may answer twice differently
                who = culprit(frame)
                if who is not None:
                    tamper("open", "a path object %s from %s" % (describe(name), who))
                return
        real = resolve(name)
        if real and (real == grader_dir or real.startswith(grader_dir + "/")):
            who = culprit(frame)
            if who is not None:
                tamper("open grader file", "%s from %s" % (name, who))

    handlers = {
        "sys.settrace": on_trace,
        "sys.setprofile": on_trace,
        "object.__setattr__": on_setattr,
        "compile": on_compile,
        "code.__new__": on_code_new,
        "exec": on_exec,
        "function.__new__": on_exec,
        "marshal.loads": on_marshal,
        "marshal.load": on_marshal,
        "import": on_import,
        "ctypes.dlopen": on_dlopen,
        "open": on_open,
        "os.remove": on_open,
        "os.rename": on_open,
        "os.truncate": on_open,
    }
    for event in (
        "sys.monitoring.register_callback",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys._current_frames",
    ):
        handlers[event] = strict
    for event in (
        "ctypes.cdata",
        "ctypes.cdata/buffer",
        "ctypes.string_at",
        "ctypes.wstring_at",
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.call_function",
    ):
        handlers[event] = on_ctypes
    return handlers
