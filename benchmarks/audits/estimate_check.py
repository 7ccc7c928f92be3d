"""How good `eval`'s estimate is (issue 78.3): for each case, the real command is run once; the estimate line it logs
(the minutes the other episodes take, with its range) is compared with the time those episodes really took (from the
estimate line to the end of the rollouts), and the estimate's own cost is stated (it runs no episode: the journal
holds exactly the evaluation's episodes). Prints a table; asserts nothing. Run it alone on the machine.

    .venv/bin/python benchmarks/audits/estimate_check.py [--cases counter,mcp,bfcl] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
ESTIMATE = re.compile(
    r"estimate: the first (\d+) of (\d+) episodes took ([\d.]+) s, so the other (\d+) take about ([\d.]+) min "
    r"\(([\d.]+)-([\d.]+) min"
)


def _mcp_tasks(path: Path) -> None:
    """Ten tasks for npm's filesystem server (made here: the server has none; any task does for timing)."""
    rows = []
    for i in range(10):
        call = {"name": "create_directory", "arguments": {"path": f"/sandbox/box{i}"}}
        rows.append({"task_id": f"mcp-est-{i}", "env_name": "mcp", "query": f"Make a folder /sandbox/box{i}.",
                     "source": "synthetic", "reference_solution": [[call]]})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def cases(tmp: Path) -> dict[str, list[str]]:
    _mcp_tasks(tmp / "mcp_tasks.jsonl")
    return {
        "counter": ["--set", "env.name=counter", "--set", "env.plugins=[examples.counter_env]", "--subset", "test",
                    "--limit", "20", "--k", "4"],
        "mcp": ["-c", str(ROOT / "configs/mcp_filesystem.yaml"), "--env", "mcp", "--set",
                f"env.mcp.tasks_file={tmp / 'mcp_tasks.jsonl'}", "--set", "env.mcp.test_share=0.99", "--subset", "test",
                "--limit", "10", "--k", "4"],
        "bfcl": ["--env", "bfcl", "--split", "multi_turn_base", "--limit", "8", "--k", "4"],
    }  # fmt: skip


def _when(line: str) -> float | None:
    m = STAMP.match(line)
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() if m else None


def measure(name: str, args: list[str], tmp: Path) -> dict:
    out = tmp / f"{name}.jsonl"
    start = time.time()
    res = subprocess.run([sys.executable, "-m", "evolvekit.cli.main", "eval", *args, "--out", str(out), "--json"],
                         capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    wall = time.time() - start
    if res.returncode != 0:
        return {"case": name, "error": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "failed"}
    lines = res.stderr.splitlines()
    est = next(((ln, m) for ln in lines if (m := ESTIMATE.search(ln))), None)
    done = [t for ln in lines if "rollouts:" in ln and " done in " in ln and (t := _when(ln)) is not None]
    journal = len((tmp / f"{name}.episodes.jsonl").read_text().splitlines()) - 1
    row = {"case": name, "command": "evolvekit eval " + " ".join(args), "wall_s": round(wall, 1), "journal": journal}
    if est is None:
        return {**row, "error": "no estimate line"}
    line, m = est
    first, episodes, first_s, left = int(m.group(1)), int(m.group(2)), float(m.group(3)), int(m.group(4))
    point, low, high = (float(m.group(i)) for i in (5, 6, 7))
    at, end = _when(line), (done[-1] if done else None)
    truth = (end - at) / 60 if at is not None and end is not None else None  # one-second log stamps
    return {**row, "episodes": episodes, "pace_from": first, "pace_s": first_s, "left": left, "point_min": point,
            "low_min": low, "high_min": high, "true_min": None if truth is None else round(truth, 2),
            "inside": truth is not None and low <= truth <= high,
            "ratio": None if not truth else round(point / truth, 2)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="counter,mcp,bfcl")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        table = cases(tmp)
        rows = [measure(n, table[n], tmp) for n in a.cases.split(",")]
    head = "| case | episodes | estimate after | estimate (min) | range (min) | true (min) | inside | estimate / true "
    head += "| episodes run |"
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | error: {r['error']} |" + " |" * 7)
            continue
        lines.append(
            f"| {r['case']} | {r['episodes']} | {r['pace_from']} ({r['pace_s']} s) | {r['point_min']} | "
            f"{r['low_min']}-{r['high_min']} | {r['true_min']} | {r['inside']} | {r['ratio']} | {r['journal']} |"
        )
    text = "\n".join(lines)
    print(text)
    print(json.dumps(rows))
    if a.out:
        cmds = "\n".join(f"- {r['case']}: `{r.get('command', '')}` ({r.get('wall_s', '?')} s in all)" for r in rows)
        a.out.write_text(text + "\n\n" + cmds + "\n")


if __name__ == "__main__":
    main()
