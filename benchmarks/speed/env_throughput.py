"""BFCL environment throughput: steps/s in-process and over HTTP on loopback, and p50/p99 latency under 16
concurrent clients. Prints figures; asserts nothing.  Usage: .venv/bin/python benchmarks/speed/env_throughput.py
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from evolvekit.env.base import Action
from evolvekit.env.bfcl import data
from evolvekit.env.bfcl.env import BfclEnv
from evolvekit.env.service.client import RemoteEnv
from evolvekit.types import ToolCall

ACTIONS = [
    Action(tool_calls=[ToolCall(name="ls", arguments={})]),
    Action(tool_calls=[ToolCall(name="pwd", arguments={})]),
    Action(tool_calls=[ToolCall(name="cd", arguments={"folder": "document"})]),
    Action(tool_calls=[ToolCall(name="cd", arguments={"folder": ".."})]),
]


def run_steps(env, task, n: int) -> list[float]:
    env.reset(task)
    lat = []
    for i in range(n):
        t = time.perf_counter()
        env.step(ACTIONS[i % len(ACTIONS)])
        lat.append(time.perf_counter() - t)
    env.close()
    return lat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=16)
    args = ap.parse_args()
    task = next(t for t in data.load_tasks("multi_turn_base") if t.task_id == "multi_turn_base_0")

    lat = run_steps(BfclEnv(), task, args.steps)
    print(f"in-process: {len(lat) / sum(lat):,.0f} steps/s (p50 {statistics.median(lat) * 1e6:.0f} us)")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The server runs in its own process, as in production (sharing this process's GIL would halve both).
    server = subprocess.Popen(
        [sys.executable, "-m", "evolvekit.cli.main", "env", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            httpx.get(url + "/healthz")
            break
        except httpx.HTTPError:
            time.sleep(0.05)

    t0 = time.perf_counter()
    lat = run_steps(RemoteEnv(url), task, args.steps)
    print(
        f"HTTP, 1 client: {len(lat) / (time.perf_counter() - t0):,.0f} steps/s "
        f"(p50 {statistics.median(lat) * 1e3:.2f} ms)"
    )

    per_client = max(1, args.steps // args.clients)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.clients) as pool:
        results = list(pool.map(lambda _: run_steps(RemoteEnv(url), task, per_client), range(args.clients)))
    wall = time.perf_counter() - t0
    all_lat = sorted(x for r in results for x in r)
    p50 = all_lat[len(all_lat) // 2] * 1e3
    p99 = all_lat[int(len(all_lat) * 0.99)] * 1e3
    print(
        f"HTTP, {args.clients} concurrent clients: {len(all_lat) / wall:,.0f} steps/s, "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"
    )
    server.terminate()
    server.wait()


if __name__ == "__main__":
    main()
