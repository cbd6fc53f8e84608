"""The runtime guard's integrity checks, shipped beside it as ``swe_gym_guard_checks``.

Run by the guard's audit hook (``guard.py``) from a private copy of this module, like the
guard itself (its own globals and a copy of the builtins), with the hook's bound primitives
and its safe readers passed in. What they compare, and when:

- **identity snapshots** of module attributes (functions and classes, and the methods of
  pytest's classes), taken at the start: the part of pytest and pluggy that decides a test's
  outcome (``_HOT``) after every watched test's call phase, everything else loaded at the start
  at collection and at session end; a change is honest only when its new value is a function of
  trusted code (``acceptable``) or, in the latter, functools' cache around the old value
  (``memoized``);
- **the import machinery and trace functions**: finders and hooks on ``sys.meta_path``,
  ``sys.path_hooks``, ``sys.path_importer_cache`` and every thread's trace and profile
  functions must be trusted code;
- **test code**: each watched test's function and its ``__wrapped__`` layers must be the code
  object pytest compiled from the test file (``loaded``; an inherited test: its base's def),
  or, when its rewrite cache is newer than the start, equal to the bytes read at the start
  compiled with the same rewriting; after each phase the same objects;
- **bindings**: the test file's top-level ``from X import Y`` names (read from its syntax
  tree) must be ``X.Y`` at collection, and after it either ``X.Y`` or as they were then (a
  module imported again rebinds ``X.Y``, not the test's name).

Findings are recorded through the guard's ``tamper`` (never raised).
"""

# Rebound by honest code during a run (pytest's capture and warnings plugins, unittest).
_REBOUND = frozenset(
    ["excepthook", "unraisablehook", "displayhook", "breakpointhook", "stdout", "stderr", "stdin"]
    + ["showwarning", "_showwarnmsg_impl", "_showwarning_orig"]
)
_SKIP = frozenset(["warnings", "__main__"])
# Compared after every watched test's call phase: what decides a test's outcome while it runs
# (pytest's API and comparison helpers, outcomes, the runner and its reports, the test item,
# unittest and skip handling, the assertion helpers, pluggy's calling of hooks). The rest of
# pytest (formatting, collection, fixtures' setup) is compared at collection and session end.
_HOT = frozenset(
    ["pytest", "_pytest.python_api", "_pytest.raises", "_pytest.recwarn", "_pytest.outcomes"]
    + ["_pytest.runner", "_pytest.reports", "_pytest.python", "_pytest.unittest"]
    + ["_pytest.skipping", "_pytest.assertion", "_pytest.assertion.util"]
    + ["pluggy", "pluggy._callers", "pluggy._hooks", "pluggy._result"]
)


def _checks(
    config,
    trusted_sources,
    tamper,
    untrusted_file,
    trusted_callable,
    from_imports,
    resolve,
    tests,
    root,
    prims,
    sysv,
    safe,
):
    """The integrity checks, run by the hook (so with its bound primitives): module
    attributes by identity, import machinery, trace and profile functions, and each watched
    test's function against the test file compiled from the bytes read at the start."""
    import ast
    from itertools import repeat
    from operator import is_

    b_all, b_map = all, map
    b_getattr, b_vars, b_id, b_isinstance, b_type, b_len = prims
    modules, gettrace, getprofile, current_frames = sysv
    describe, is_type = safe["describe"], safe["is_type"]
    method_type, func_dict, mod_dict = safe["method_type"], safe["func_dict"], safe["mod_dict"]
    type_mro = safe["type_mro"]
    type_name, sys_dict, threading_dict = (
        safe["type_name"],
        safe["sys_dict"],
        safe["threading_dict"],
    )
    b_list, b_str = list, str
    ast_parse, b_compile = ast.parse, compile
    marker = object()

    def compare_doc():
        """(a plain function: its type is the function type, bound here)"""

    def trusted_module(mod):
        """At the start nothing of the patch has run: every module loaded is trusted but the
        working copy's own (none is, before conftest files load)."""
        f = b_getattr(mod, "__file__", None)
        return not (b_isinstance(f, str) and f.startswith(root + "/"))

    code_kinds = (b_type(compare_doc), b_type(len), property, classmethod, staticmethod, b_type)

    def snap(mod, classes):
        """[dict, its names, their values] groups of the module's functions and classes (and,
        when ``classes``, of its own classes' methods and properties). Data is left out:
        honest code rebinds it (``sys.stdout``, ``warnings.filters``, pytest's singletons)."""
        d = b_vars(mod)
        pairs = [
            (k, v) for k, v in list(d.items()) if b_isinstance(v, code_kinds) and k not in _REBOUND
        ]
        groups = [[d, [k for k, _ in pairs], [v for _, v in pairs]]]
        if classes:
            for v in [v for v in d.values()]:
                if b_isinstance(v, b_type) and b_getattr(v, "__module__", None) == mod.__name__:
                    cd = b_getattr(v, "__dict__", None)
                    if cd is not None:
                        pairs = [(k, x) for k, x in list(cd.items()) if b_isinstance(x, code_kinds)]
                        groups.append([cd, [k for k, _ in pairs], [x for _, x in pairs]])
        return groups

    def flat(snaps):
        """The snapshot as parallel lists per mapping type (module dicts, class dicts' proxies),
        each compared in one C-level pass."""
        tables = {}
        for name, groups in snaps:
            for d, keys, vals in groups:
                out = tables.setdefault(b_type(d), [[], [], [], [], b_type(d).get])
                out[0].extend([name] * b_len(keys))
                out[1].extend([d] * b_len(keys))
                out[2].extend(keys)
                out[3].extend(vals)
        return list(tables.values())

    own = [n for n in modules if n in _HOT]
    hot = [
        (n, snap(modules[n], True))
        for n in sorted(own)
        if modules[n] is not None and trusted_module(modules[n])
    ]
    hot += [
        (n, snap(modules[n], False)) for n in ("swe_gym_verdict", "swe_gym_guard") if n in modules
    ]
    hot = flat(hot)
    cold = flat(
        [
            (n, snap(m, False))
            for n, m in sorted(modules.items())
            if m is not None and n not in own and n not in _SKIP and trusted_module(m)
        ]
    )
    state = {"items": {}, "bindings": [], "top": {}, "fresh": set()}

    function_type = b_type(compare_doc)

    def acceptable(v):
        """A changed entry is honest when its new value is a function of trusted code (or a
        property, classmethod or staticmethod of such, or such a function bound to a class of
        trusted code): pytest's ``legacypath`` plugin, its debugging plugin (``pdb.set_trace``)
        and ``typing_extensions`` rebind functions this way. Anything else is tampering."""
        if b_type(v) is function_type:
            return not untrusted_file(v.__code__.co_filename)
        if b_type(v) is property:
            return all(f is None or acceptable(f) for f in (v.fget, v.fset, v.fdel))
        if b_type(v) is classmethod or b_type(v) is staticmethod:
            return acceptable(v.__func__)
        if b_type(v) is method_type:  # a classmethod bound to its class (pytest's pdb.set_trace)
            owner = v.__self__
            return acceptable(v.__func__) and is_type(owner) and trusted_callable(owner)
        return False

    import functools
    import gc

    lru_type, referents = b_type(functools.lru_cache()(compare_doc)), gc.get_referents

    def memoized(now, old):
        """``now`` is functools' C cache around the very value the snapshot holds (astroid
        caches ``tokenize._compile`` so): it calls that value and nothing else. Read from the
        wrapper's own references (its ``__wrapped__`` is a plain attribute anyone can set)."""
        return b_type(now) is lru_type and any(r is old for r in referents(now))

    def compare(tables, where, memo=False):
        """Identity of every snapshot entry, in C (``operator.is_`` over ``dict.get``): a
        value's own ``__eq__`` is never asked. Entries that changed are looked at one by one;
        with ``memo`` (modules outside pytest's hot set), a cache around the old value is
        honest too."""
        for table in tables:
            compare_one(table, where, memo)

    def compare_one(table, where, memo):
        names, dicts, keys, vals, get = table
        if b_all(b_map(is_, vals, b_map(get, dicts, keys, repeat(marker)))):
            return
        for i, k in enumerate(keys):
            now = dicts[i].get(k, marker)
            if now is vals[i]:
                continue
            if now is not marker and (acceptable(now) or (memo and memoized(now, vals[i]))):
                vals[i] = now
                continue
            what = "deleted" if now is marker else describe(now)
            tamper("changed", "%s: %s to %s (%s)" % (names[i], k, what, where), veto=False)

    verified = {}  # id -> finder found trusted (per phase, an unchanged finder is not re-read)

    def machinery(where, everything=False):
        """The import system's finders and hooks (as ``sys`` holds them now) and the trace and
        profile functions of every thread must be trusted code."""
        found = b_list(sys_dict.get("meta_path") or ()) + b_list(sys_dict.get("path_hooks") or ())
        if everything:  # hundreds of path finders: at collection and session end only
            found += b_list((sys_dict.get("path_importer_cache") or {}).values())
            verified.clear()
        for f in found:
            if f is None or verified.get(b_id(f)) is f:
                continue
            if trusted_callable(f):
                verified[b_id(f)] = f
            else:
                tamper("import machinery", "%s (%s)" % (describe(f), where), veto=False)
        for fn, what in ((gettrace(), "trace"), (getprofile(), "profile")):
            if fn is not None and not trusted_callable(fn):
                tamper(what + " function", "%s (%s)" % (describe(fn), where), veto=False)
        for fn in (threading_dict.get("_trace_hook"), threading_dict.get("_profile_hook")):
            if fn is not None and not trusted_callable(fn):
                tamper("threading hook", "%s (%s)" % (describe(fn), where), veto=False)
        for frame in current_frames().values():
            while frame is not None:
                t = frame.f_trace
                if t is not None and not trusted_callable(t):
                    tamper("frame trace", "%s (%s)" % (describe(t), where), veto=False)
                frame = frame.f_back

    def trusted_defs(real, module, config_obj):
        """(defs, the file's top-level ``from X import Y`` bindings, exact). ``defs``: (class
        or None, name, line) -> code. When pytest ran the module's code from a clean stack with
        the file unchanged since the start (``loaded``), its own code objects, compared by
        identity (exact); else the bytes read at the start compiled here with the assertion
        rewriting pytest gave the module, compared by equality."""
        src = trusted_sources.get(real)
        if src is None:
            return None, [], False
        binds = bindings(module, src, real)
        top = state["top"].get(real)
        if top is not None and real not in state["fresh"]:
            return defs_of(top), binds, True
        tree = ast_parse(src, real)
        if "@py_builtins" in b_vars(module):
            from _pytest.assertion.rewrite import rewrite_asserts

            try:
                rewrite_asserts(tree, src, real, config_obj)
            except TypeError:
                rewrite_asserts(tree, real, config_obj)
        return defs_of(b_compile(tree, real, "exec", dont_inherit=True)), binds, False

    def bindings(module, src, real):
        """The test file's top-level ``from X import Y [as Z]`` bindings (``from_imports``,
        read from the bytes taken at the start): [module, X, Y, Z, its value at collection]."""
        try:
            found = from_imports(src, real)
        except Exception:  # not Python this interpreter reads: pytest could not import it
            return []
        return [[module, x, y, z, marker] for x, y, z in found]

    def defs_of(top):
        """(class or None, name, line) -> code, from a module's code object: functions at the
        top and in class bodies (code without CO_OPTIMIZED)."""
        defs = {}
        code_type = b_type(top)
        owners = [(None, top)] + [
            (c.co_name, c) for c in top.co_consts if b_type(c) is code_type and not c.co_flags & 1
        ]
        for cls_name, owner in owners:
            for c in owner.co_consts:
                if b_type(c) is code_type:
                    defs[(cls_name, c.co_name, c.co_firstlineno)] = c
        return defs

    def loaded(real, top):
        if real not in state["top"]:
            state["top"][real] = top

    def fresh(real):
        state["fresh"].add(real)

    def chain(obj):
        """The test's callable and its ``__wrapped__`` layers, read through the built-in
        descriptors only; a layer that is not a plain function ends the chain."""
        out = []
        while obj is not None and b_len(out) < 16:
            if b_type(obj) is method_type:
                obj = obj.__func__
            out.append(obj)
            if b_type(obj) is not function_type:
                break
            obj = func_dict(obj).get("__wrapped__")
        return out

    def verify(item, defs, real, exact):
        layers = chain(item.obj)
        cls = item.cls
        name = (item.originalname if hasattr(item, "originalname") else None) or item.name
        name = name.split("[")[0]
        wanted = []  # the test file's defs of ``name`` in the first class of the MRO with one
        for owner in [type_name(k) for k in type_mro(cls)] if cls is not None else [None]:
            wanted = [c for (k, n, _), c in defs.items() if k == owner and n == name]
            if wanted:
                break
        found = False
        for layer in layers:
            if b_type(layer) is not function_type:
                if wanted:
                    tamper("test code", "%s runs %s" % (item.nodeid, describe(layer)), veto=False)
                continue
            code = layer.__code__
            where = seen_paths.get(code.co_filename)
            if where is None:
                where = seen_paths[code.co_filename] = resolve(code.co_filename)
            if where == real:
                if code.co_name == name and any(
                    code is w or (not exact and code == w) for w in wanted
                ):
                    found = True
                else:
                    tamper(
                        "test code",
                        "%s runs code that is not the test file's" % item.nodeid,
                        veto=False,
                    )
            elif untrusted_file(code.co_filename):
                tamper(
                    "test code", "%s is wrapped by %s" % (item.nodeid, code.co_filename), veto=False
                )
        if wanted and not found:
            tamper(
                "test code", "%s does not run the test file's %s" % (item.nodeid, name), veto=False
            )
        return [b_id(x) for x in layers]

    seen_paths = {}

    def watch(session):
        compare(hot, "collection")
        compare(cold, "collection", True)
        machinery("collection", True)
        per_file = {}
        for item in b_list(session.items):
            path = getattr(item, "path", None) or getattr(item, "fspath", None)
            path = b_str(path) if path is not None else None
            real = seen_paths.get(path) if path is not None else None
            if path is not None and real is None:
                real = seen_paths[path] = resolve(path)
            if real not in tests:
                continue
            module = item.module
            if real not in per_file:
                try:
                    per_file[real] = trusted_defs(real, module, session.config)
                except Exception:  # an old pytest's rewriter: the code is left unchecked
                    per_file[real] = (None, [], False)
                defs, binds, exact = per_file[real]
                modname = mod_dict(module).get("__name__")
                if modules.get(modname) is not module:
                    tamper(
                        "test module",
                        "sys.modules[%s] is not the collected module" % modname,
                        veto=False,
                    )
                state["bindings"].extend(binds)
            defs, _, exact = per_file[real]
            if defs is not None:
                ids = verify(item, defs, real, exact)
                state["items"][b_id(item)] = (item, defs, real, exact, ids)
        check_bindings("collection")

    def check_bindings(where, only=None):
        """Each binding is ``X.Y`` at collection (the value it holds then is kept); later a
        binding that is not ``X.Y`` is tampering only when the test module's own name changed
        since collection: a test or a library that imports ``X`` again (``del sys.modules``,
        ``reload``) rebinds ``X.Y`` and leaves the test's name as it was, honestly."""
        for binding in state["bindings"]:
            module, src_mod, attr, local, kept = binding
            if only is not None and module is not only:
                continue
            src = modules.get(src_mod)
            have = mod_dict(module).get(local, marker)
            if b_type(src) is not b_type(module) or have is marker:
                continue  # absent, or not a plain module: nothing to compare by its dict
            if where == "collection":
                binding[4] = have
            elif have is kept:
                continue
            want = mod_dict(src).get(attr, marker)
            if want is not marker and want is not have:
                tamper(
                    "test binding",
                    "%s.%s is not %s.%s (%s)" % (module.__name__, local, src_mod, attr, where),
                    veto=False,
                )

    def phase(item, when):
        """After each phase of a watched test: its function's identity; after the call phase
        also pytest's hot modules, the import machinery and trace functions, the test module's
        bindings. Not the standard library: honest fixtures patch it (compared at collection
        and at session end)."""
        where = "%s %s" % (item.nodeid, when)
        if when == "call":  # what must hold while the test body ran (a change undone within
            compare(hot, where)  # it is not seen: SECURITY.md)
            machinery(where)
            check_bindings(where, item.module)
        it, defs, real, exact, ids = state["items"].get(b_id(item), (None,) * 5)
        if it is item and [b_id(x) for x in chain(item.obj)] != ids:
            verify(item, defs, real, exact)
            tamper(
                "test code", "%s: its function changed after collection" % item.nodeid, veto=False
            )

    def everything():
        compare(hot, "session end")
        compare(cold, "session end", True)
        machinery("session end", True)
        check_bindings("session end")

    return {"watch": watch, "phase": phase, "all": everything, "loaded": loaded, "fresh": fresh}
