"""The overlap of an evidence spec's synthesized training tasks with its held-out panels (issue 76.3), from the kept
runs (``benchmarks/evidence/keep_runs.py``): per row and seed, the run's synthesized tasks, how many are worded like a
held-out task (numbers masked: the filter's own test, `questioning/pipeline.py: wording`; the filter drops such a task
before training, so a kept one would be a leak), and how close the rest come: the largest word overlap (Jaccard of
the masked word sets) with any task of each panel, and how many reach 0.8.

    PYTHONPATH=src .venv/bin/python benchmarks/audits/synthesized_overlap.py \
        configs/evidence/evidence_self_examples.yaml benchmarks/results/kept_runs/evidence_self_examples \
        --out benchmarks/results/synthesized_overlap.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

NEAR = 0.8  # word overlap counted as near (the lexical threshold of the earlier deduplication, evidence_env_only.md)


def words(query: str | list[str]) -> frozenset[str]:
    from evolvekit.questioning.pipeline import wording

    return frozenset(wording(query).split())


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def panels_of(spec_path: Path, row_overrides: list[str]) -> dict[str, list[str | list[str]]]:
    """The held-out requests a row's runs are filtered against: the environment's eval split and each panel file."""
    from evolvekit.config import load_config
    from evolvekit.env.registry import env_tasks
    from evolvekit.report.ablate import load_spec
    from evolvekit.safejson import read_jsonl
    from evolvekit.types import Task

    spec = load_spec(spec_path)
    cfg = load_config(spec_path.parent / spec.base, [*spec.budget, *row_overrides])
    out = {
        f"{cfg.env.family or cfg.env.name} {cfg.env.eval_split} split": [
            t.query for t in env_tasks(cfg.env, cfg.env.eval_split)
        ]
    }
    for panel in cfg.train.eval_panels:
        out[Path(panel).stem] = [t.query for t in read_jsonl(panel, Task, "a task")]
    return out


def overlap_rows(spec_path: Path, kept: Path) -> list[dict]:
    from evolvekit.questioning.pipeline import wording
    from evolvekit.report.ablate import load_spec

    spec = load_spec(spec_path)
    rows = []
    for row in spec.rows:
        heldout = panels_of(spec_path, row.overrides)
        masked = {name: {wording(q) for q in qs} for name, qs in heldout.items()}
        sets = {name: [words(q) for q in qs] for name, qs in heldout.items()}
        for path in sorted((kept / row.name).glob("seed*.json"), key=lambda p: int(p.stem[4:])):
            data = json.loads(path.read_text())
            tasks = data["tables"]["tasks"]
            source = tasks["columns"].index("source")
            body = tasks["columns"].index("json")
            queries = [json.loads(r[body])["query"] for r in tasks["rows"] if r[source] == "synthetic"]
            entry: dict = {"row": row.name, "seed": int(path.stem[4:]), "tasks": len(queries), "panels": {}}
            for name in heldout:
                best = [max((jaccard(words(q), h) for h in sets[name]), default=0.0) for q in queries]
                entry["panels"][name] = {
                    "worded_like": sum(wording(q) in masked[name] for q in queries),
                    "max_overlap": max(best, default=0.0),
                    "near": sum(b >= NEAR for b in best),
                }
            entry["queries"] = queries
            rows.append(entry)
    return rows


def report(rows: list[dict], command: str) -> str:
    names = list(rows[0]["panels"]) if rows else []
    head = "| row | seed | synthesized tasks | " + " | ".join(
        f"{n}: worded like one | {n}: largest word overlap | {n}: ≥ {NEAR}" for n in names
    )
    lines = [f"$ {command}", "", "# Synthesized training tasks against the held-out panels", "", head + " |"]
    lines.append("|" + "---|" * (3 + 3 * len(names)))
    for r in rows:
        cells = [r["row"], str(r["seed"]), str(r["tasks"])]
        for n in names:
            p = r["panels"][n]
            cells += [str(p["worded_like"]), f"{p['max_overlap']:.2f}", str(p["near"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Every synthesized request, by run:", ""]
    for r in rows:
        lines.append(f"- {r['row']} seed {r['seed']}: " + "; ".join(repr(q) for q in r["queries"]))
    return "\n".join(lines) + "\n"


def main() -> None:
    import sys

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("kept", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    text = report(overlap_rows(args.spec, args.kept), "PYTHONPATH=src .venv/bin/python " + " ".join(sys.argv))
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
