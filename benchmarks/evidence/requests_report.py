"""What a run's self-questioning wrote (issue 96, item 1): its worked examples and synthesized tasks as text, their
funnels, and the checks the issue asks of them: no request states a parameter name, every tool the examples'
exploration executed has an example, and the overlap of every request's wording (numbers masked) and word trigrams
with both held-out panels.

    .venv/bin/python benchmarks/evidence/requests_report.py runs/quickstart-<stamp> configs/quickstart.yaml \
        --out benchmarks/results/requests_quickstart_seed0
writes OUT.md and OUT.json (the requests as text, the funnels, the checks).
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import subprocess
from pathlib import Path

from evolvekit.config import load_config
from evolvekit.env.registry import env_tasks, has_task_source
from evolvekit.questioning.pipeline import wording
from evolvekit.questioning.requests import names_identifier
from evolvekit.questioning.self_examples import demos_from_json
from evolvekit.safejson import read_jsonl
from evolvekit.store.sqlite import RunStore
from evolvekit.types import Task, TaskSource


def trigrams(text: str) -> set[tuple[str, ...]]:
    w = wording(text).replace("#", " ").split()
    return {tuple(w[i : i + 3]) for i in range(len(w) - 2)}


def counts_table(counts: dict) -> list[str]:
    """A one-row markdown table of named counts."""
    return [
        "| " + " | ".join(counts) + " |",
        "|" + "---|" * len(counts),
        "| " + " | ".join(map(str, counts.values())) + " |",
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("config", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    cfg = load_config(a.config, [])
    store = RunStore(a.run_dir / "run.sqlite")
    demos = demos_from_json(store.get_meta("worked_examples") or "[]")
    ex_funnel = json.loads(store.get_meta("worked_examples_requests") or "{}")
    syn_funnel = json.loads(store.get_meta("synthesis_funnel") or "{}")
    synthetic = [t for t in store.tasks() if t.source == TaskSource.SYNTHETIC and t.metadata.get("curation")]
    db = sqlite3.connect(a.run_dir / "run.sqlite")
    split = env_tasks(cfg.env, cfg.env.eval_split)[: cfg.train.eval_tasks] if has_task_source(cfg.env) else []
    panels = {Path(p).stem: read_jsonl(p, Task, "a task") for p in cfg.train.eval_panels}
    held = {"panel 1": split, **panels}
    held_words = {k: {wording(t.query) for t in v} for k, v in held.items()}
    held_tri = {k: set().union(*(trigrams(" ".join(t.turns)) for t in v)) for k, v in held.items()}
    explored = sorted(
        {
            c["name"]
            for r in db.execute("SELECT json FROM explorations")
            for s in json.loads(r[0])["steps"]
            if s.get("ok")
            for c in s["tool_calls"]
        }  # fmt: skip
    )

    def row(request: str, calls) -> dict:
        tri = trigrams(request)
        return {
            "request": request,
            "calls": [f"{c.name}({json.dumps(c.arguments)})" for c in calls],
            "names_identifier": names_identifier(request, calls),
            "same_wording_as": [k for k, w in held_words.items() if wording(request) in w],
            "trigram_overlap": {k: round(len(tri & t) / len(tri), 3) if tri else 0.0 for k, t in held_tri.items()},
        }

    examples = [row(d.request, [d.call]) for d in demos]
    made = [
        {
            **row(" ".join(t.turns), [c for turn in t.reference_solution or [] for c in turn]),
            "round_trip": t.metadata.get("curation", {}).get("round_trip"),
        }  # fmt: skip
        for t in synthetic
    ]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    report = {
        "run_dir": str(a.run_dir),
        "config": str(a.config),
        "report_commit": commit,
        "examples": examples,
        "examples_funnel": ex_funnel,
        "example_tools": sorted({d.call.name for d in demos}),
        "synthesized": made,
        "synthesis_funnel": syn_funnel,
        "checks": {
            "requests_naming_an_identifier": sum(r["names_identifier"] for r in examples + made),
            "requests_worded_like_a_held_out_task": sum(bool(r["same_wording_as"]) for r in examples + made),
            "documented_fallbacks": ex_funnel.get("fallback"),
        },
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"# Requests written by the run: {a.run_dir.name} ({a.config})",
        "",
        f"Report written at {commit} by `benchmarks/evidence/requests_report.py` from the run's store.",
        "",
        "| check | value |",
        "|---|---|",
        f"| requests naming a parameter or function identifier | {report['checks']['requests_naming_an_identifier']} |",
        f"| requests worded like a held-out task (numbers masked) | "
        f"{report['checks']['requests_worded_like_a_held_out_task']} |",
        f"| worked examples / tools with an example | {len(examples)} / {', '.join(report['example_tools'])} |",
        f"| examples on the documented fallback | {ex_funnel.get('fallback')} |",
        f"| synthesized tasks kept | {len(made)} |",
        "",
        "## Worked examples' funnel",
        "",
        *counts_table(ex_funnel),
        "",
        "## Worked examples",
        "",
        "| request | call | trigram overlap (" + ", ".join(held_tri) + ") |",
        "|---|---|---|",
    ]
    for r in examples:
        lines.append(
            f"| {r['request']} | `{r['calls'][0]}` | {', '.join(str(v) for v in r['trigram_overlap'].values())} |"
        )
    req = {k: v for k, v in syn_funnel.items() if k.startswith("request_")}
    rest = {k: v for k, v in syn_funnel.items() if k not in req}
    lines += [
        "",
        "## Synthesis funnel",
        "",
        *counts_table(rest),
        "",
        *counts_table(req),
        "",
        "## Synthesized tasks",
        "",
        "| request | reference | round-trip pass rate | trigram overlap (" + ", ".join(held_tri) + ") |",
        "|---|---|---|---|",
    ]
    for r in made:
        rt = (r["round_trip"] or {}).get("pass_rate")
        overlap = ", ".join(str(v) for v in r["trigram_overlap"].values())
        lines.append(f"| {r['request']} | `{'; '.join(r['calls'])}` | {rt} | {overlap} |")
    if explored:
        lines += ["", f"Tools executed by the synthesis explorations: {', '.join(explored)}."]
    a.out.with_suffix(".md").write_text("\n".join(re.sub(r"\s+$", "", ln) for ln in lines) + "\n")
    print(a.out.with_suffix(".md"))


if __name__ == "__main__":
    main()
