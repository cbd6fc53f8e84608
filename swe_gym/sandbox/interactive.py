"""Known interactive programs (editors, pagers, REPLs, ``tail -f``): the env refuses them with a
hint before they run, since the sandbox's shell has no terminal and an empty stdin."""

from __future__ import annotations

import re
import shlex

_EDIT_HINT = (
    "use the str_replace_editor tool, or non-interactive commands (sed -i, cat <<'EOF' > file)"
)
_VIEW_HINT = "print the file instead: cat, head, tail, or sed -n '10,40p' FILE"
_INTERACTIVE: dict[str, str] = {
    **dict.fromkeys(
        ["vim", "vi", "nvim", "view", "vimdiff", "nano", "pico", "emacs", "joe", "mcedit", "micro"],
        _EDIT_HINT,
    ),
    **dict.fromkeys(["less", "more", "most"], _VIEW_HINT),
    **dict.fromkeys(
        ["top", "htop", "atop", "btop", "iotop"],
        "use a one-shot command instead: ps aux, or top -b -n 1",
    ),
    "man": "manual pages need a pager; use COMMAND --help instead",
    "info": "use COMMAND --help instead",
    "watch": "run the command once instead of watching it",
    **dict.fromkeys(["screen", "tmux"], "run commands directly; background jobs: CMD > log 2>&1 &"),
    **dict.fromkeys(["ssh", "telnet", "ftp", "sftp"], "there is no network access in the sandbox"),
}
_REPLS = {
    "python",
    "python2",
    "python3",
    "ipython",
    "ipython3",
    "node",
    "irb",
    "ghci",
    "lua",
    "R",
    "julia",
    "sqlite3",
    "psql",
    "mysql",
    "bash",
    "sh",
    "zsh",
    "fish",
}
_REPL_VERSIONED = re.compile(r"^python\d+(\.\d+)?$")
_SEPARATORS = {
    ";",
    "&&",
    "||",
    "|",
    "&",
    "|&",
    "\n",
    "(",
    ")",
    "{",
    "}",
    "!",
    "then",
    "do",
    "else",
    "elif",
}
_PREFIXES = {"sudo", "exec", "command", "time", "nohup", "env", "nice", "timeout", "stdbuf"}


def _simple_commands(cmd: str) -> list[list[str]]:
    """Split a command line into simple commands' words (a best-effort, quote-aware split)."""
    lex = shlex.shlex(cmd.replace("\n", " ; "), posix=True, punctuation_chars=";&|()")
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        tokens = list(lex)
    except ValueError:  # unbalanced quotes: let bash report it
        return []
    out: list[list[str]] = [[]]
    for tok in tokens:
        if tok in _SEPARATORS or set(tok) <= set(";&|()"):
            out.append([])
        else:
            out[-1].append(tok)
    return [c for c in out if c]


# Commands longer than this are not checked (shlex is slow per character and quadratic in a
# token's length); they run, and an interactive program among them ends at the timeout.
MAX_CHECKED_COMMAND = 20_000
_NAMES = re.compile(
    r"(?<![\w.-])(?:"
    + "|".join(map(re.escape, sorted({*_INTERACTIVE, *_REPLS, "tail"}, key=len, reverse=True)))
    + r"|python[\d.]+)(?![\w.-])"
)


def interactive_command_message(cmd: str) -> str | None:
    """A helpful message if ``cmd`` starts a known interactive program, else ``None``.

    The env returns it as the observation instead of running the command (which would only
    end at the timeout or print garbage, since there is no terminal). Linear in ``len(cmd)``:
    a command that names no such program as a word, or longer than ``MAX_CHECKED_COMMAND``,
    is not tokenised at all."""
    if len(cmd) > MAX_CHECKED_COMMAND or not _NAMES.search(cmd):
        return None
    for words in _simple_commands(cmd):
        i = 0
        # Skip VAR=value assignments and wrappers (sudo, env, timeout 10, ...).
        while i < len(words):
            w = words[i]
            if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w):
                i += 1
            elif w in _PREFIXES:
                i += 1
                while i < len(words) and (words[i].startswith("-") or words[i][:1].isdigit()):
                    i += 1
            else:
                break
        if i >= len(words):
            continue
        prog = words[i].rsplit("/", 1)[-1]
        args = words[i + 1 :]
        if prog in _INTERACTIVE:
            return (
                f"`{prog}` is interactive and cannot run here (there is no terminal and stdin "
                f"is empty); {_INTERACTIVE[prog]}."
            )
        if prog == "tail" and any(
            a in ("-f", "-F", "--follow") or a.startswith("--follow=") for a in args
        ):
            return "`tail -f` never ends; use `tail -n 50 FILE` to see the end of a file."
        if prog in _REPLS or _REPL_VERSIONED.match(prog):
            if not args or args == ["-i"]:
                return (
                    f"`{' '.join(words[i:])}` starts an interactive session, which cannot run "
                    f"here (stdin is empty); run a script file or pass code with -c / -e, e.g. "
                    f"{prog} -c '...' or {prog} script."
                )
    return None
