"""Peak resident memory of a command and every process it starts (issue 55: the test suite's peak, under 8 GB).

    .venv/bin/python benchmarks/speed/peak_memory.py --out peak.json -- .venv/bin/python -m pytest

Runs the command, samples the resident set size (RSS) of its whole process tree from /proc every ``--every``
seconds, and prints two figures when it ends: the peak of the tree's summed RSS (what the machine had to hold at
once) and the peak RSS of any single process (what `/usr/bin/time -v` reports), with the command's exit status.
Linux only. The command's own output passes through.

With ``--label-file PATH`` the command gets ``EVOLVEKIT_TEST_NOW=PATH``; the test suite's conftest writes the id of
the running test there, and the figures add the tests at whose time the tree's RSS peaked (``--top`` of them, each
with its own peak): where the memory goes, not only how much.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss(root: int) -> tuple[int, int]:
    """(summed RSS of ``root`` and all its descendants, the largest single RSS among them), in bytes."""
    kids = _children()
    total = largest = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        r = _rss(pid)
        total, largest = total + r, max(largest, r)
        stack += kids.get(pid, [])
    return total, largest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    ap.add_argument("--out", type=Path, help="also write the figures here as JSON")
    ap.add_argument("--label-file", type=Path, help="a file the command writes its current step's name to")
    ap.add_argument("--top", type=int, default=15, help="how many labels to report, by their peak")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("give a command after --")
    env = dict(os.environ)
    if args.label_file:
        args.label_file.write_text("")
        env["EVOLVEKIT_TEST_NOW"] = str(args.label_file.resolve())
    proc = subprocess.Popen(cmd, env=env)
    peak = {"tree_bytes": 0, "process_bytes": 0, "samples": 0}
    by_label: dict[str, int] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            total, largest = tree_rss(proc.pid)
            peak["tree_bytes"] = max(peak["tree_bytes"], total)
            peak["process_bytes"] = max(peak["process_bytes"], largest)
            peak["samples"] += 1
            if args.label_file:
                try:
                    label = args.label_file.read_text().strip() or "(start)"
                except OSError:
                    label = "(unreadable)"
                by_label[label] = max(by_label.get(label, 0), total)
            done.wait(args.every)

    t0 = time.monotonic()
    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    rc = proc.wait()
    done.set()
    watcher.join()
    gib = 1024**3
    result = {
        "command": " ".join(cmd),
        "exit_status": rc,
        "seconds": round(time.monotonic() - t0, 1),
        "peak_tree_gib": round(peak["tree_bytes"] / gib, 2),
        "peak_process_gib": round(peak["process_bytes"] / gib, 2),
        "samples": peak["samples"],
        "every_s": args.every,
    }
    if args.label_file:
        top = sorted(by_label.items(), key=lambda kv: -kv[1])[: args.top]
        result["peak_tree_gib_by_label"] = {k: round(v / gib, 2) for k, v in top}
    line = json.dumps(result)
    print(f"peak memory: {line}", file=sys.stderr)
    if args.out:
        args.out.write_text(line + "\n")
    sys.exit(rc)


if __name__ == "__main__":
    main()
