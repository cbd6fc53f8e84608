"""The HTML of ``python -m algos.report``: one self-contained page, every text escaped.

Observations and actions are agent-controlled text, so everything taken from a run goes through
:func:`html.escape` and none of it is ever placed inside the page's script. The page's
Content-Security-Policy allows only its own script (by hash) and fetches nothing, so even markup
that slipped through could neither run nor load anything.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
from typing import Any

MAX_CHARS = 20_000  # per action/observation shown; the JSONL keeps the whole text
CURVES = (
    "reward_mean",
    "resolved_rate",
    "hack_rate",
    "turns_mean",
    "loss",
    "kl",
    "entropy",
    "clip_frac",
    "mismatch_kl",
    "mismatch_ratio_mean",
    "is_weight_mean",
    "grad_norm",
    "kept",
    "filtered_frac",
    "failure_masked",
    "time_s",
)

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.2em;margin-top:1.5em}h3{font-size:1.05em;margin:.3em 0}
.curves{display:flex;flex-wrap:wrap;gap:12px}.curve{border:1px solid #ddd;padding:4px}
.curve svg{display:block}.task{border-top:1px solid #ccc;padding:.4em 0}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:6px;margin:2px 0;
max-height:30em;overflow:auto}.turn{margin:.4em 0 .4em 1em;border-left:3px solid #bbb;
padding-left:.6em}.ok{color:#070}.bad{color:#a00}.muted{color:#777}
summary{cursor:pointer}table{border-collapse:collapse}td,th{padding:2px 8px;text-align:left}
"""

SCRIPT = """
(function () {
  var box = document.getElementById('filter');
  var tasks = Array.prototype.slice.call(document.querySelectorAll('section.task'));
  function apply() {
    var q = box.value.toLowerCase(), shown = 0;
    tasks.forEach(function (t) {
      var hit = t.getAttribute('data-task').toLowerCase().indexOf(q) >= 0;
      t.hidden = !hit; if (hit) { shown += 1; }
    });
    document.getElementById('shown').textContent = shown + ' of ' + tasks.length + ' tasks';
  }
  function openAll(open) {
    document.querySelectorAll('details.episode').forEach(function (d) { d.open = open; });
  }
  box.addEventListener('input', apply);
  document.getElementById('expand').addEventListener('click', function () { openAll(true); });
  document.getElementById('collapse').addEventListener('click', function () { openAll(false); });
  apply();
  document.body.setAttribute('data-ready', '1');
})();
"""


def esc(value: Any) -> str:
    """Text of ``value`` safe for HTML element content and quoted attributes."""
    return html.escape(str(value), quote=True)


def _clip(text: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    return text[:MAX_CHARS] + f"\n... ({len(text) - MAX_CHARS} more characters in the JSONL)"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def svg_curve(
    name: str, xs: list[float], ys: list[float], width: int = 300, height: int = 140
) -> str:
    """A line chart of ``ys`` over ``xs`` as inline SVG (finite points only)."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return ""
    pad = 28
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    sx = (width - 2 * pad) / ((x1 - x0) or 1)
    sy = (height - 2 * pad) / ((y1 - y0) or 1)
    coords = " ".join(
        f"{pad + (x - x0) * sx:.1f},{height - pad - (y - y0) * sy:.1f}" for x, y in pts
    )
    dots = "".join(
        f'<circle cx="{pad + (x - x0) * sx:.1f}" cy="{height - pad - (y - y0) * sy:.1f}"'
        f' r="2"><title>{esc(_fmt(x))}: {esc(_fmt(y))}</title></circle>'
        for x, y in pts
    )
    return (
        f'<div class="curve"><svg width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(name)}"><text x="{pad}" y="14" font-weight="bold">{esc(name)}</text>'
        f'<text x="2" y="{pad + 4}" font-size="10">{esc(_fmt(y1))}</text>'
        f'<text x="2" y="{height - pad}" font-size="10">{esc(_fmt(y0))}</text>'
        f'<text x="{pad}" y="{height - 8}" font-size="10">{esc(_fmt(x0))}</text>'
        f'<text x="{width - pad}" y="{height - 8}" font-size="10" text-anchor="end">'
        f"{esc(_fmt(x1))}</text>"
        f'<polyline fill="none" stroke="#36c" stroke-width="1.5" points="{coords}"/>'
        f'<g fill="#36c">{dots}</g></svg></div>'
    )


def render_curves(metrics: list[dict[str, Any]]) -> str:
    xs = [float(r.get("iteration", i + 1)) for i, r in enumerate(metrics)]
    out = []
    for name in CURVES:
        if not any(isinstance(r.get(name), int | float) for r in metrics):
            continue
        ys = [float(r[name]) if isinstance(r.get(name), int | float) else math.nan for r in metrics]
        out.append(svg_curve(name, xs, ys))
    return "".join(out) or '<p class="muted">no metrics.jsonl</p>'


def _flagged(traj: Any) -> bool:
    return isinstance(traj.report, dict) and bool(traj.report.get("hack_signals"))


def _branch_note(traj: Any) -> str:
    """A branched group's member: which trunk it forked from and where; or why its group fell
    back to plain episodes (agents.branching)."""
    info = getattr(traj, "branch", None)
    if not isinstance(info, dict):
        return ""
    if info.get("fallback"):
        return (
            f" &middot; <span class=branch>plain episode {esc(info.get('branch_index'))} (branch "
            f"at turn {esc(info.get('planned_turn'))} fell back: {esc(info['fallback'])})</span>"
        )
    return (
        f" &middot; <span class=branch>branch {esc(info.get('branch_index'))} of trunk "
        f"{esc(info.get('parent_episode_id'))} at turn {esc(info.get('branch_turn'))}</span>"
    )


def render_episode(traj: Any, meta: dict[str, Any]) -> str:
    cls = "ok" if traj.resolved else "bad"
    shared = getattr(traj, "branch_turn", None) or 0  # turns copied from the trunk
    head = (
        f"<summary>iteration {esc(meta.get('iteration', '?'))} &middot; policy version "
        f"{esc(meta.get('policy_version', '?'))} &middot; seed {esc(traj.seed)} &middot; "
        f'<span class="reward {cls}">reward {esc(_fmt(float(traj.reward)))}</span> &middot; '
        f"{'resolved' if traj.resolved else 'not resolved'} &middot; "
        f"{esc(traj.finish_reason)} &middot; {len(traj.turns)} turns{_branch_note(traj)}"
        f"{' &middot; <b class=bad>hack flagged</b>' if _flagged(traj) else ''}</summary>"
    )
    parts = [head]
    if _flagged(traj):
        parts.append(
            '<p class="bad">hack monitor: '
            + "; ".join(
                f"{esc(h.get('signal'))} ({esc(h.get('detail'))}) -&gt; {esc(h.get('action'))}"
                for h in traj.report["hack_signals"]
            )
            + "</p>"
        )
    if traj.error:
        parts.append(f'<p class="bad">error:</p><pre>{esc(_clip(traj.error))}</pre>')
    cmd = (getattr(traj, "agent", None) or {}).get("cmd")
    if isinstance(cmd, dict):  # --agent-cmd: how the harness process ended, what it printed
        head = (
            f"agent command {esc(cmd.get('command'))}: {esc(cmd.get('end'))}, exit code "
            f"{esc(cmd.get('exit_code'))}, {esc(_fmt(float(cmd.get('wall_s') or 0)))} s"
        )
        logs = "".join(
            f"<div>{name}</div><pre>{esc(_clip(str(cmd.get(name) or '')))}</pre>"
            for name in ("stdout", "stderr")
        )
        parts.append(f'<details class="cmd"><summary>{head}</summary>{logs}</details>')
    if traj.prompt:
        parts.append(
            f"<details><summary>prompt</summary><pre>{esc(_clip(traj.prompt))}</pre></details>"
        )
    for i, turn in enumerate(traj.turns):
        flags = ""
        if turn.invalid_action:
            flags = f", invalid action: {esc(turn.invalid_reason or '-')}"
        parts.append(
            f'<div class="turn"><b>turn {i + 1}</b>{" (trunk)" if i < shared else ""} '
            f'<span class="muted">tool '
            f"{esc(turn.tool or '-')}, reward {esc(_fmt(float(turn.reward)))}, "
            f"{len(turn.completion_ids)} tokens{flags}</span>"
            f'<div>action</div><pre class="action">{esc(_clip(turn.action))}</pre>'
            f'<div>observation</div><pre class="observation">{esc(_clip(turn.observation))}</pre>'
            "</div>"
        )
    if traj.patch:
        parts.append(
            f"<details><summary>patch</summary><pre>{esc(_clip(traj.patch))}</pre></details>"
        )
    return f'<details class="episode">{"".join(parts)}</details>'


def render_tasks(iterations: list[dict[str, Any]]) -> str:
    by_task: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    for it in iterations:
        for traj in it["episodes"]:
            by_task.setdefault(str(traj.task_id), []).append((it["meta"], traj))
    if not by_task:
        return '<p class="muted">no saved episodes (RUN_DIR/episodes/)</p>'
    out = []
    for task, eps in sorted(by_task.items()):
        rewards = [float(t.reward) for _, t in eps]
        solved = sum(bool(t.resolved) for _, t in eps)
        hacked = sum(_flagged(t) for _, t in eps)
        out.append(
            f'<section class="task" data-task="{esc(task)}"><h3>{esc(task)}</h3>'
            f'<p class="muted">{len(eps)} episodes, mean reward '
            f"{esc(_fmt(sum(rewards) / len(rewards)))}, resolved {solved}"
            f"{f', hack flagged {hacked}' if hacked else ''}</p>"
            + "".join(render_episode(t, m) for m, t in eps)
            + "</section>"
        )
    return "".join(out)


def render_report(run: dict[str, Any]) -> str:
    """The page for :func:`algos.report.load_run`'s ``run``."""
    script_hash = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    csp = (
        f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src 'sha256-{script_hash}'"
    )
    n_eps = sum(len(it["episodes"]) for it in run["iterations"])
    cfg = run.get("config") or {}
    summary = ", ".join(
        f"{k}={esc(cfg[k])}"
        for k in ("env", "policy", "loss", "advantage_estimator", "off_policy_correction")
        if k in cfg
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">'
        f"<title>run {esc(run.get('name', ''))}</title><style>{CSS}</style></head><body>"
        f'<h1>run {esc(run.get("name", ""))}</h1><p class="muted">{summary}</p>'
        f'<h2>Curves</h2><div class="curves">{render_curves(run["metrics"])}</div>'
        f"<h2>Episodes</h2><p>{n_eps} saved episodes over {len(run['iterations'])} iterations; "
        '<input id="filter" placeholder="filter tasks"> <span id="shown"></span> '
        '<button id="expand">expand all</button> <button id="collapse">collapse all</button></p>'
        f"{render_tasks(run['iterations'])}<script>{SCRIPT}</script></body></html>"
    )
