"""Keep finished evidence runs in the repository, and put them back, so a table longer than one session (a machine
that starts empty each time) resumes from the seeds that finished before.

    .venv/bin/python benchmarks/evidence/keep_runs.py keep runs/evidence_env_only \
        benchmarks/results/kept_runs/evidence_env_only --rows oracle_nav_attr sft_then_grpo grpo_partial_credit
    .venv/bin/python benchmarks/evidence/keep_runs.py restore \
        benchmarks/results/kept_runs/evidence_env_only runs/evidence_env_only

``keep`` writes, for each finished run (``<row>/seed<k>/summary.json`` present) of the named rows, one text file
``<row>/seed<k>.json``: its summary.json and the store tables the evidence report reads (meta, iterations, tasks,
metrics, evaluations; ``report/figures.py: load_summary``). Trajectories, steps, experiences and explorations are
left out: a kept run reports its figures and helper health, not its episodes. ``restore`` rebuilds each kept run as
a run folder (``run.sqlite`` with the store's own schema, and ``summary.json``) where none exists, so
``benchmarks/evidence/evidence.py`` skips it as finished and reports it with the rest.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

TABLES = ("meta", "iterations", "tasks", "metrics", "evaluations")
STORE = "run.sqlite"


def keep_run(run: Path, dest: Path) -> bool:
    """One finished run as ``dest`` (a .json file); False when the run has not finished."""
    summary = run / "summary.json"
    if not summary.is_file():
        return False
    con = sqlite3.connect(f"file:{run / STORE}?mode=ro", uri=True)
    try:
        tables = {}
        for table in TABLES:
            cur = con.execute(f"SELECT * FROM {table}")  # noqa: S608 - our table names
            tables[table] = {"columns": [d[0] for d in cur.description], "rows": [list(r) for r in cur.fetchall()]}
    finally:
        con.close()
    kept = {"summary": json.loads(summary.read_text()), "tables": tables}
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n")
    return True


def restore_run(kept: Path, run: Path) -> bool:
    """A kept run back as a run folder at ``run``; False (nothing written) when ``run`` has a store already."""
    if (run / STORE).exists():
        return False
    from evolvekit.store.sqlite import SCHEMA

    data = json.loads(kept.read_text())
    run.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(run / STORE)
    try:
        con.executescript(SCHEMA)
        for table, content in data["tables"].items():
            if table not in TABLES:
                raise ValueError(f"{kept}: table {table!r} is not one a kept run holds ({', '.join(TABLES)})")
            cols = content["columns"]
            known = {row[1] for row in con.execute(f"PRAGMA table_info({table})")}
            if not cols or not set(cols) <= known:
                raise ValueError(f"{kept}: table {table!r}: columns {cols!r} are not the store's ({sorted(known)})")
            marks = ", ".join("?" * len(cols))
            con.executemany(
                f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})",  # noqa: S608 - checked names
                [tuple(r) for r in content["rows"]],
            )
        con.commit()
    finally:
        con.close()
    (run / "summary.json").write_text(json.dumps(data["summary"], indent=2))
    return True


def keep(root: Path, out: Path, rows: list[str] | None) -> list[Path]:
    written = []
    for summary in sorted(root.glob("*/seed*/summary.json")):
        run = summary.parent
        if rows and run.parent.name not in rows:
            continue
        dest = out / run.parent.name / f"{run.name}.json"
        if keep_run(run, dest):
            written.append(dest)
    return written


def restore(kept_root: Path, root: Path) -> list[Path]:
    return [
        root / f.parent.name / f.stem
        for f in sorted(kept_root.glob("*/seed*.json"))
        if restore_run(f, root / f.parent.name / f.stem)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("keep", help="finished runs of a run folder -> kept .json files")
    k.add_argument("root", type=Path)
    k.add_argument("out", type=Path)
    k.add_argument("--rows", nargs="*", default=None)
    r = sub.add_parser("restore", help="kept .json files -> run folders (where none exists)")
    r.add_argument("kept", type=Path)
    r.add_argument("root", type=Path)
    args = ap.parse_args()
    done = keep(args.root, args.out, args.rows) if args.cmd == "keep" else restore(args.kept, args.root)
    for path in done:
        print(path)
    print(f"{args.cmd}: {len(done)} run(s)")


if __name__ == "__main__":
    main()
