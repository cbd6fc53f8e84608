"""The diff of a working copy against ``base_commit``, taken the same way on every backend.

The agent owns ``/testbed/.git``: its config can name filters, diff drivers, ``core.fsmonitor``
or hooks, and running git there runs the agent's commands. So the diff never uses it. It runs
as a *fresh* process inside the sandbox (not the agent's shell) with a clean environment, no
system or global config (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``), and a
private, config-less git dir (``GIT_DIR``) whose objects come from the base commit's objects;
``--no-ext-diff --no-textconv``. In-tree ``.gitattributes`` can then only pick built-in
behaviour: a filter or driver it names is not defined anywhere.

Nested repositories (``git -C sub init``) are diffed as ordinary files: their ``.git`` is left
out and their files are added one by one (git itself would record a gitlink, or fail when the
nested repository has no commit). Any path with a ``.git`` component in any letter case is
left out of the diff (git refuses such paths; grading would refuse the patch).

Exit codes: 0 with the diff on stdout; anything else with git's message on stderr.
"""

from __future__ import annotations

# Inputs (environment): GIT_DIR (private, may not exist yet: created), GIT_WORK_TREE,
# GIT_INDEX_FILE (private; an existing one is a stat cache), BASE (the base commit's sha),
# ALTERNATE (objects dir of the base), SEED_INDEX (optional index to take stat data from),
# FILEMODE (true/false).
DIFF_SCRIPT = r"""
set -eu
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME=/nonexistent GIT_TERMINAL_PROMPT=0
unset GIT_CONFIG_PARAMETERS GIT_CONFIG_COUNT XDG_CONFIG_HOME GIT_EXTERNAL_DIFF 2>/dev/null || true
if [ ! -e "$GIT_DIR/HEAD" ]; then
  mkdir -p "$GIT_DIR/objects/info" "$GIT_DIR/objects/pack" "$GIT_DIR/refs/heads"
  printf '%s\n' "$ALTERNATE" > "$GIT_DIR/objects/info/alternates"
  printf '%s\n' "$BASE" > "$GIT_DIR/HEAD"
fi
g() { git -c core.fsmonitor=false -c core.hooksPath=/dev/null -c core.fileMode="$FILEMODE" -c core.compression=0 \
      -c core.untrackedCache=false -c core.splitIndex=false -c core.quotePath=false "$@"; }
if [ -n "${SEED_INDEX:-}" ] && [ -f "$SEED_INDEX" ] && [ ! -L "$SEED_INDEX" ]; then
  cp -- "$SEED_INDEX" "$GIT_INDEX_FILE" 2>/dev/null || rm -f -- "$GIT_INDEX_FILE"
fi
# Entries back to the base tree; stat data kept where content matches (only edits re-hash).
if ! { [ -f "$GIT_INDEX_FILE" ] && g read-tree -m "$BASE" 2>/dev/null; }; then
  rm -f -- "$GIT_INDEX_FILE"
  g read-tree "$BASE"
fi
cd "$GIT_WORK_TREE"
scratch=$(mktemp -d "$GIT_DIR/scratch.XXXXXX")
trap 'rm -rf -- "$scratch"' EXIT
g ls-files -z -o --exclude-standard > "$scratch/untracked"
set --
: > "$scratch/nested"
while IFS= read -r -d '' p; do
  case $p in
    */) set -- "$@" ":(exclude,literal)${p%/}"; printf '%s\0' "${p%/}" >> "$scratch/nested" ;;
  esac
done < "$scratch/untracked"
# A path with a .git component in any letter case is git's own; git refuses to add it.
g add -A -- . ':(exclude,icase,glob).git/**' ':(exclude,icase,glob)**/.git/**' "$@"
if [ -s "$scratch/nested" ]; then
  while IFS= read -r -d '' d; do
    find "./$d" \( -iname .git -prune \) -o \( -type f -o -type l \) -print0
  done < "$scratch/nested" | sed -z 's|^\./||' | sort -z > "$scratch/files"
  rc=0; g check-ignore -z --stdin < "$scratch/files" > "$scratch/ign" || rc=$?
  [ "$rc" -le 1 ] || exit "$rc"
  sort -z < "$scratch/ign" > "$scratch/ignored"
  comm -z -23 "$scratch/files" "$scratch/ignored" | g update-index --add --replace -z --stdin
fi
g diff --cached --binary --no-color --no-ext-diff --no-textconv "$BASE"
"""


def diff_env(
    *, git_dir: str, work_tree: str, index: str, base: str, alternate: str,
    seed_index: str = "", filemode: bool = True, path: str = "/usr/local/bin:/usr/bin:/bin",
) -> dict[str, str]:  # fmt: skip
    """The whole environment of the diff process (nothing else of the caller's)."""
    return {
        "PATH": path,
        "LANG": "C.UTF-8",
        "GIT_DIR": git_dir,
        "GIT_WORK_TREE": work_tree,
        "GIT_INDEX_FILE": index,
        "BASE": base,
        "ALTERNATE": alternate,
        "SEED_INDEX": seed_index,
        "FILEMODE": "true" if filemode else "false",
    }


__all__ = ["DIFF_SCRIPT", "diff_env"]
