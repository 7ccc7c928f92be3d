"""``evolvekit dashboard RUN_DIR``: a read-only local web page to browse a run, live while it runs.

Pages: overview (held-out evaluations, curves, metrics), tasks (provenance, reference solutions), trajectories
(step by step: tool calls, observations, GOOD/BAD attribution colouring, injected experience), the experience
pool with scores. Every piece of text from models and environments is HTML-escaped. The store is opened
read-only per request (WAL: the training process is never blocked). Bound to 127.0.0.1 by the CLI.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse, Response
from starlette.middleware.trustedhost import TrustedHostMiddleware

from evolvekit.report.figures import connect_ro, heldout_lines, load_summary, write_figures
from evolvekit.store.sqlite import read_trajectory

GOOD_COLOR, BAD_COLOR = "#c8f7c5", "#f7c5c5"
CSS = f"""body{{font-family:system-ui,sans-serif;margin:1.5em;max-width:80em}}nav a{{margin-right:1em}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.25em .5em;vertical-align:top}}
pre{{white-space:pre-wrap;margin:0}}.GOOD{{background:{GOOD_COLOR}}}.BAD{{background:{BAD_COLOR}}}
.NEUTRAL{{background:#eeeeee}}td.src-grounded{{border-left:6px solid #2b7a2b}}
td.src-llm{{border-left:6px dashed #5a4fcf}}
.exp{{background:#fff3c4;border-left:4px solid #e0b000;padding:.4em;margin:.5em 0}}"""

e = html.escape

# the Host header must name the loopback the CLI binds: a web page that rebinds its own name to 127.0.0.1 still sends
# its name, and gets 400 instead of the run's tasks and reference solutions (DNS rebinding)
LOCAL_HOSTS = ["127.0.0.1", "localhost"]


def _local_only(app: FastAPI) -> FastAPI:
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=LOCAL_HOSTS)
    return app


def _page(title: str, body: str, base: str = "", up: str | None = None, run_nav: bool = True) -> HTMLResponse:
    back = f"<a href='{e(up)}'>all runs</a>" if up else ""
    links = (
        (
            f"<a href='{base}/'>overview</a><a href='{base}/tasks'>tasks</a><a href='{base}/requests'>requests</a>"
            f"<a href='{base}/trajectories'>trajectories</a><a href='{base}/experiences'>experiences</a>"
        )
        if run_nav
        else ""
    )
    nav = f"<nav>{back}{links}</nav>"
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
        f"<meta http-equiv='refresh' content='60'><style>{CSS}</style></head><body>{nav}"
        f"<h1>{e(title)}</h1>{body}</body></html>"
    )


def _request(task_json: str | None) -> str:
    """A stored task's request as text ('' for a task the store does not hold, such as a held-out one)."""
    if not task_json:
        return ""
    query = json.loads(task_json).get("query", "")
    return query if isinstance(query, str) else "\n".join(str(q) for q in query)


def evaluation_table(evaluations: dict[str, dict]) -> str:
    """The held-out evaluations as one table: a row per evaluation (before, each iteration's, after), a column per
    figure (avg@k, best@k, the sample classes, each panel's, and what they rest on: tasks, sampling error)."""
    if not evaluations:
        return "<p>none yet</p>"
    keys = sorted(
        {k for ev in evaluations.values() for k, v in ev.items() if isinstance(v, (int, float))},
        key=lambda k: ("/" in k, "class/" in k, k),
    )
    head = "".join(f"<th>{e(k)}</th>" for k in keys)
    body = "".join(
        f"<tr><td>{e(point)}</td>" + "".join(f"<td>{_cell(ev.get(k))}</td>" for k in keys) + "</tr>"
        for point, ev in sorted(evaluations.items(), key=lambda pe: (pe[1].get("iteration", 0), _ORDER.get(pe[0], 1)))
    )
    return f"<table><tr><th>evaluation</th>{head}</tr>{body}</table>"


_ORDER = {"before": 0, "cold_start": 1, "after": 2}  # at one iteration: the evaluation before training comes first


def _cell(value) -> str:
    if isinstance(value, bool) or value is None:
        return ""
    return f"{value:.3f}" if isinstance(value, float) else e(str(value))


def create_dashboard(run_dir: Path, base: str = "", up: str | None = None) -> FastAPI:
    """One run's dashboard; ``base`` is the URL prefix it is mounted under (links carry it), ``up`` a link back."""
    run_dir = Path(run_dir)
    base = e(base)
    if not (run_dir / "run.sqlite").is_file():
        raise FileNotFoundError(f"{run_dir} has no run.sqlite")
    app = _local_only(FastAPI(title=f"evolvekit dashboard: {run_dir.name}", docs_url=None, redoc_url=None))
    fig_dir = run_dir / "report" / "live"

    @app.get("/", response_class=HTMLResponse)
    def overview():
        return _overview_page(run_dir, fig_dir, base, up)

    @app.get("/figures/{name}")
    def figure(name: str):
        path = (fig_dir / name).resolve()
        if path.parent != fig_dir.resolve() or not path.is_file() or path.suffix != ".png":
            raise HTTPException(404)
        return Response(path.read_bytes(), media_type="image/png")

    @app.get("/tasks", response_class=HTMLResponse)
    def tasks():
        return _tasks_page(run_dir, base, up)

    @app.get("/requests", response_class=HTMLResponse)
    def requests():
        return _requests_page(run_dir, base, up)

    @app.get("/trajectories", response_class=HTMLResponse)
    def trajectories(task: str | None = None):
        return _trajectories_page(run_dir, task, base, up)

    @app.get("/trajectories/{trajectory_id}", response_class=HTMLResponse)
    def trajectory(trajectory_id: str):
        return _trajectory_page(run_dir, trajectory_id, base, up)

    @app.get("/experiences", response_class=HTMLResponse)
    def experiences():
        return _experiences_page(run_dir, base, up)

    return app


def _overview_page(run_dir: Path, fig_dir: Path, base: str, up: str | None) -> HTMLResponse:
    run = load_summary(run_dir)
    figs = write_figures(run, fig_dir)
    evals = evaluation_table(run.evaluations)
    before, after = run.evaluations.get("before") or {}, run.evaluations.get("after") or {}
    # what the figures rest on (tasks x samples, sampling error), with the run's warning where it is too little
    rests = "".join(f"<p>{e(line)}</p>" for line in heldout_lines(before, after, []))
    last = run.metrics[max(run.metrics)] if run.metrics else {}
    rows = "".join(f"<tr><td>{e(k)}</td><td>{v:.4g}</td></tr>" for k, v in sorted(last.items()))
    imgs = "".join(f"<h3>{e(n)}</h3><img src='{base}/figures/{e(p.name)}' alt='{e(n)}'>" for n, p in figs.items())
    helpers = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in run.helper_sources.items())
    return _page(
        f"run {run_dir.name}",
        f"<p>{len(run.metrics)} iterations done</p>"
        f"<h2>Helper sources</h2><table>{helpers}</table><h2>Held-out evaluation</h2>"
        f"{evals}{rests}{imgs}<h2>Latest iteration</h2><table>{rows}</table>",
        base,
        up,
    )


def _tasks_page(run_dir: Path, base: str, up: str | None) -> HTMLResponse:
    con = connect_ro(run_dir)
    rows = []
    for (j,) in con.execute("SELECT json FROM tasks ORDER BY rowid LIMIT 500"):
        t = json.loads(j)
        meta = t.get("metadata") or {}
        prov = {k: meta[k] for k in ("exploration_id", "signal", "curation", "family", "category") if k in meta}
        ref = "\n".join(
            f"{c['name']}({json.dumps(c.get('arguments', {}))})"
            for turn in (t.get("reference_solution") or [])
            for c in turn
        )
        query = t["query"] if isinstance(t["query"], str) else "\n".join(t["query"])
        rows.append(
            f"<tr><td>{e(t['task_id'])}</td><td>{e(t.get('source', ''))}</td><td><pre>{e(query)}</pre></td>"
            f"<td><pre>{e(ref)}</pre></td><td><pre>{e(json.dumps(prov))}</pre></td></tr>"
        )
    con.close()
    return _page(
        "tasks",
        "<table><tr><th>task</th><th>source</th><th>query</th><th>reference solution</th>"
        f"<th>provenance</th></tr>{''.join(rows)}</table>",
        base,
        up,
    )


def _requests_page(run_dir: Path, base: str, up: str | None) -> HTMLResponse:
    """Every task the run rolled out, by its request: how many episodes, their mean reward, and a link to them."""
    con = connect_ro(run_dir)
    found = con.execute(
        "SELECT t.task_id, k.json, COUNT(*), AVG(t.outcome_reward), GROUP_CONCAT(DISTINCT t.phase) "
        "FROM trajectories t LEFT JOIN tasks k ON k.task_id = t.task_id "
        "GROUP BY t.task_id ORDER BY MIN(t.rowid) LIMIT 1000"
    ).fetchall()
    con.close()
    rows = "".join(
        f"<tr><td><a href='{base}/trajectories?task={quote(tid)}'>{e(tid)}</a></td><td><pre>{e(_request(j))}</pre>"
        f"</td><td>{e(phases or '')}</td><td>{n}</td><td>{'' if r is None else f'{r:.2f}'}</td></tr>"
        for tid, j, n, r, phases in found
    )
    return _page(
        "requests",
        "<table><tr><th>task</th><th>request</th><th>phases</th><th>episodes</th><th>mean reward</th></tr>"
        f"{rows}</table>",
        base,
        up,
    )


def _trajectories_page(run_dir: Path, task: str | None, base: str, up: str | None) -> HTMLResponse:
    con = connect_ro(run_dir)
    where, args = ("WHERE t.task_id = ?", (task,)) if task else ("", ())
    rows = "".join(
        f"<tr><td><a href='{base}/trajectories/{e(tid)}'>{e(tid)}</a></td><td>{it}</td><td>{e(phase)}</td>"
        f"<td>{e(tk)}</td><td><pre>{e(_request(j)[:160])}</pre></td>"
        f"<td>{'' if r is None else f'{r:.2f}'}</td><td>{'yes' if g else ''}</td></tr>"
        for tid, it, phase, tk, r, g, j in con.execute(
            "SELECT t.trajectory_id, t.iteration, t.phase, t.task_id, t.outcome_reward, t.experience_guided, "
            f"k.json FROM trajectories t LEFT JOIN tasks k ON k.task_id = t.task_id {where} "
            "ORDER BY t.rowid DESC LIMIT 500",
            args,
        )
    )
    con.close()
    return _page(
        f"trajectories of {task}" if task else "trajectories",
        "<table><tr><th>trajectory</th><th>iteration</th><th>phase</th><th>task</th><th>request</th>"
        f"<th>reward</th><th>guided</th></tr>{rows}</table>",
        base,
        up,
    )


def _trajectory_page(run_dir: Path, trajectory_id: str, base: str, up: str | None) -> HTMLResponse:
    con = connect_ro(run_dir)
    traj = read_trajectory(con, trajectory_id)
    con.close()
    if traj is None:
        raise HTTPException(404, "no such trajectory")
    t = traj.model_dump(mode="json")
    labels = t.get("step_attributions") or []
    source = t.get("attribution_source") or ""
    parts = [
        f"<p>task {e(t['task_id'])} · reward {e(str(t.get('outcome_reward')))} · "
        f"{'experience-guided' if t['flags'].get('experience_guided') else 'vanilla'}</p>"
    ]
    if t.get("experience_used"):
        parts.append(f"<p>experiences used: {e(', '.join(t['experience_used']))}</p>")
    parts.append("<table><tr><th>step</th><th>label</th><th>action</th><th>tool calls</th><th>observation</th></tr>")
    for i, s in enumerate(t.get("steps", [])):
        label = labels[i] if i < len(labels) else ""
        calls = "\n".join(f"{c['name']}({json.dumps(c.get('arguments', {}))})" for c in s.get("tool_calls", []))
        tag = f" ({source})" if label and source else ""
        parts.append(
            f"<tr class='{e(label)}' data-label='{e(label)}' data-source='{e(source)}'><td>{s['index']}</td>"
            f"<td class='src-{e(source)}'>{e(label)}{e(tag)}</td>"
            f"<td><pre>{e(s['action_text'])}</pre></td><td><pre>{e(calls)}</pre></td>"
            f"<td><pre>{e(s.get('observation', ''))}</pre></td></tr>"
        )
    parts.append("</table>")
    return _page(f"trajectory {trajectory_id}", "".join(parts), base, up)


def _experiences_page(run_dir: Path, base: str, up: str | None) -> HTMLResponse:
    con = connect_ro(run_dir)
    rows = []
    for (j,) in con.execute("SELECT json FROM experiences ORDER BY rowid"):
        x = json.loads(j)
        score = (x.get("success_count", 0) + 1) / (x.get("use_count", 0) + 2)
        rows.append(
            f"<tr><td>{e(x['experience_id'])}</td><td class='exp'>{e(x['when_to_use'])}</td>"
            f"<td><pre>{e(x['content'])}</pre></td><td>{x.get('use_count', 0)}</td>"
            f"<td>{score:.2f}</td><td>{e(str(x.get('utility')))}</td></tr>"
        )
    con.close()
    return _page(
        "experience pool",
        "<table><tr><th>id</th><th>when to use</th><th>content</th><th>uses</th>"
        f"<th>score</th><th>utility</th></tr>{''.join(rows)}</table>",
        base,
        up,
    )


def create_collection_dashboard(root: Path) -> FastAPI:
    """A folder of runs (an ablation): an index of rows and seeds with their held-out results, each run's own
    dashboard under ``/runs/<row>/<seed>/``. Runs that appear while it serves (a live ablation) are picked up."""
    from urllib.parse import quote

    from evolvekit.report.collection import find_runs, load_groups

    root = Path(root)
    app = _local_only(FastAPI(title=f"evolvekit dashboard: {root.name}", docs_url=None, redoc_url=None))
    mounted: set[str] = set()

    def mount_new() -> None:
        for run_dir in find_runs(root):
            prefix = "/runs/" + quote(run_dir.relative_to(root).as_posix())
            if prefix not in mounted:
                app.mount(prefix, create_dashboard(run_dir, base=prefix, up="/"))
                mounted.add(prefix)

    @app.get("/", response_class=HTMLResponse)
    def index():
        mount_new()
        rows = []
        for g in load_groups(root):
            for r in g.runs:
                prefix = "/runs/" + quote(r.run_dir.relative_to(root).as_posix())
                after = r.evaluations.get("after") or r.evaluations.get("before") or {}
                res = ", ".join(
                    f"{k}={v:.3f}" for k, v in sorted(after.items()) if "@" in k and isinstance(v, (int, float))
                )
                rows.append(
                    f"<tr><td>{e(g.name)}</td><td><a href='{e(prefix)}/'>{e(r.run_dir.name)}</a></td>"
                    f"<td>{len(r.metrics)}</td><td>{e(res or 'running')}</td></tr>"
                )
        return _page(
            f"runs in {root.name}",
            "<table><tr><th>row</th><th>run</th><th>iterations</th>"
            f"<th>held-out after training</th></tr>{''.join(rows)}</table>",
            run_nav=False,
        )

    mount_new()
    return app
