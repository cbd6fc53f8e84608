"""The runtime guard's files, shipped beside it as ``swe_gym_guard_io``: paths, ctimes, the
record writer, a test file's import bindings.

Run from a private copy of this module (its own globals and a copy of the builtins), like the
guard (``guard.py``); everything here is bound when ``_io`` runs, at the guard's start, before
any code of the patch: ``os.path.realpath``, ``json`` and ``hmac`` are rebuilt from C functions
bound then, so a later swap of the standard library does not reach them.

- ``resolve``: ``os.path.realpath`` from bound primitives;
- ``written_after``: a file changed after the start, by its ctime (the file system's clock),
  never on a read-only mount (see its doc);
- ``same_bytes``: a file's bytes are these;
- ``write`` / ``flush``: each record JSON-encoded with the process id and a sequence number,
  HMAC-signed under the run's key, buffered and appended to the record file;
- ``from_imports`` (module level): a test file's top-level ``from X import Y`` bindings, read
  from its syntax tree.
"""


def _io(key, path, hmac_digest, lock):
    """The guard's file primitives and record writer, over the record file ``path``."""
    import os

    b_isinstance, b_len, b_str, b_bytes = isinstance, len, str, bytes
    b_int, b_list, b_tuple, b_type, b_any, b_repr = int, list, tuple, type, any, repr
    o_open, o_write, o_fstat, o_stat, o_lstat = os.open, os.write, os.fstat, os.stat, os.lstat
    o_statvfs, st_rdonly = os.statvfs, os.ST_RDONLY
    o_readlink, o_getcwd, o_getpid = os.readlink, os.getcwd, os.getpid
    o_read, o_close, o_rdonly = os.read, os.close, os.O_RDONLY

    fd = o_open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    boot = o_fstat(fd).st_ctime  # the file system's clock, as the ctimes compared with it

    def resolve(name):
        """``os.path.realpath`` from bound primitives (the stdlib one reads module globals)."""
        if not b_isinstance(name, b_str):
            return None
        if not name.startswith("/"):
            name = o_getcwd() + "/" + name
        parts, out, hops = name.split("/"), [], 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if out:
                    out.pop()
                continue
            cur = "/" + "/".join(out + [part])
            try:
                mode = o_lstat(cur).st_mode
            except (OSError, ValueError):
                out.append(part)
                continue
            if mode & 0o170000 == 0o120000 and hops < 40:
                hops += 1
                target = o_readlink(cur)
                if target.startswith("/"):
                    out = []
                parts = target.split("/") + parts
                continue
            out.append(part)
        return "/" + "/".join(out)

    def written_after(real):
        """Whether ``real`` (else its nearest existing folder) changed after the start, by its
        ctime. Never on a read-only mount (the local sandbox's venv and interpreter): nothing
        in the sandbox can write there, and the ctime of a file there is not the sandbox's: an
        environment built beside this run hard-links the same installed files (uv's cache),
        which moves their ctime to now."""
        cur = real
        while cur and cur != "/":
            try:
                changed = o_stat(cur).st_ctime > boot
            except (OSError, ValueError):
                cur = cur.rsplit("/", 1)[0]
                continue
            if not changed:
                return False
            try:
                return not o_statvfs(cur).f_flag & st_rdonly
            except (OSError, ValueError):
                return True
        return True

    def same_bytes(name, source):
        if not b_isinstance(source, (b_bytes, b_str)) or not b_isinstance(name, b_str):
            return False
        try:
            f = o_open(name, o_rdonly)
        except OSError:
            return False
        try:
            chunks = []
            while True:
                chunk = o_read(f, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            o_close(f)
        if b_isinstance(source, b_str):
            source = source.encode("utf-8", "surrogateescape")
        return b"".join(chunks) == source

    def jstr(s):
        out = s.replace("\\", "\\\\").replace('"', '\\"')
        if b_any(ord(c) < 32 for c in out):
            out = "".join(c if ord(c) >= 32 else "\\u%04x" % ord(c) for c in out)
        return '"' + out + '"'

    def jdump(v):
        if v is None:
            return "null"
        if v is True or v is False:
            return "true" if v else "false"
        if b_type(v) is b_int:
            return "%d" % v
        if b_type(v) is b_list or b_type(v) is b_tuple:
            return "[" + ",".join([jdump(x) for x in v]) + "]"
        if b_type(v) is b_str:
            if v.isprintable() and '"' not in v and "\\" not in v:
                return '"' + v + '"'
            return jstr(v)
        return jstr(b_str.__str__(v) if b_isinstance(v, b_str) else b_repr(v))

    seq = [0]

    buf = []

    def flush():
        with lock:
            if buf:
                o_write(fd, b"".join(buf))
                del buf[:]

    def write(*record):
        """Sign and buffer a record; the buffer goes out at each test's last record, at the
        session's start and end, and with any tamper record (a run cut short loses its ``end``
        either way: a lost buffer changes no verdict)."""
        with lock:
            seq[0] += 1
            raw = jdump([o_getpid(), seq[0]] + b_list(record)).encode("utf-8", "surrogateescape")
            mac = hmac_digest(key, raw, "sha256").hex()
            buf.append(mac.encode("ascii") + b"\t" + raw + b"\n")
            kind = record[0]
            last = kind == "rep" and b_len(record) > 2 and record[2] == "teardown"
            if last or kind in ("start", "end", "tamper") or b_len(buf) >= 64:
                flush()

    return {
        "resolve": resolve,
        "written_after": written_after,
        "same_bytes": same_bytes,
        "write": write,
        "flush": flush,
        "from_imports": _imports_reader(),
    }


def _imports_reader():
    """``from_imports(src, filename)``: the ``from X import Y [as Z]`` statements of a module's
    top level (not inside a block: they run once, whatever happens), as (X, Y, Z), read from
    its syntax tree (never from text, where a string may hold the same words). Left out:
    relative imports, ``*``, a name Z that the module's own scope binds anywhere else (another
    import, an assignment, ``del``, a def or class, a loop, ``with`` or ``except`` target, a
    ``global`` declaration in a function), and imports before a ``from M import *``. Each
    binding left is the module's for good: the checks compare it with ``X.Y``."""
    import ast

    b_type, b_list, b_getattr, b_compile, b_isinstance = type, list, getattr, compile, isinstance
    node_type = ast.AST
    fields = {}  # the node types' fields, as they are now
    for c in list(vars(ast).values()):
        if b_isinstance(c, type) and issubclass(c, node_type):
            fields[c] = c._fields
    only_ast = ast.PyCF_ONLY_AST
    t_from, t_import, t_name, t_global = ast.ImportFrom, ast.Import, ast.Name, ast.Global
    t_handler, binding_ctx = ast.ExceptHandler, (ast.Store, ast.Del)
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    scopes = defs + (ast.Lambda,)  # their bodies are scopes of their own
    named = tuple(b_getattr(ast, n) for n in ("MatchAs", "MatchStar") if hasattr(ast, n))
    t_mapping = b_getattr(ast, "MatchMapping", None)

    def children(node):
        out = []
        for f in fields.get(b_type(node), ()):
            v = b_getattr(node, f, None)
            if b_type(v) is b_list:
                out.extend(x for x in v if b_isinstance(x, node_type))
            elif b_isinstance(v, node_type):
                out.append(v)
        return out

    def bound_by(node, t):
        if t is t_name:
            return [node.id] if b_type(node.ctx) in binding_ctx else []
        if t is t_import or t is t_from:
            return [a.asname or a.name.split(".")[0] for a in node.names]
        if t in defs or (t is t_handler and node.name) or (t in named and node.name):
            return [node.name]
        if t is t_mapping and node.rest:
            return [node.rest]
        return []

    def from_imports(src, filename):
        tree = b_compile(src, filename, "exec", only_ast, dont_inherit=True)
        count, declared, star = {}, set(), 0
        stack = [(n, True) for n in tree.body]  # (node, in the module's own scope)
        while stack:
            node, top = stack.pop()
            t = b_type(node)
            if t is t_global:
                declared.update(node.names)
            if top:
                for name in bound_by(node, t):
                    count[name] = count.get(name, 0) + 1
                if t is t_from and any(a.name == "*" for a in node.names):
                    star = max(star, node.lineno)
            inner = top and t not in scopes
            stack.extend((c, inner) for c in children(node))
        out = []
        for node in tree.body:
            if b_type(node) is not t_from or node.level or not node.module:
                continue
            for a in node.names:
                local = a.asname or a.name
                if count.get(local) == 1 and local not in declared and node.lineno > star:
                    out.append((node.module, a.name, local))
        return out

    return from_imports
