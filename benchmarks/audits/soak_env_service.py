"""Soak test of `evolvekit env serve`: mixed hostile and normal traffic from many clients for a fixed time.

    .venv/bin/python benchmarks/audits/soak_env_service.py --minutes 10 --clients 32 \
        --out benchmarks/results/soak_env_service.md

Starts the real service as a subprocess (`evolvekit env serve`, loopback, a token), then runs ``--clients`` threads
for ``--minutes``. Each client loops over a mix: a normal episode on the `arith` family (create, a few steps,
evaluate, release), and hostile requests (an oversized body, JSON nested 10,000 deep, a foreign Host header, a
text/plain body, an unserved environment, a task over the turn cap, an action of 30,000 calls (over a step's body
limit) and one of 300 (over the request's call cap), a bad field, an unknown instance). A probe in its own process
times `/healthz` every 0.2 s (a thread beside the 32 clients would time their GIL, not the server). At the end every
client has released what it created, so any instance still alive is a leak.

Reports: `/healthz` latency (p50 / p99 / max, overall and per minute), the server's resident memory at start (after
a warm-up minute) and at the end, HTTP status counts per request kind (any 500 is a failure), and leaked instances.
Targets (issue 52): /healthz p99 under 100 ms throughout, memory growth under 10%, 0 leaked instances, 0 HTTP 500s.
Run nothing else on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

TOKEN = "soak-token"
H = {"Authorization": f"Bearer {TOKEN}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _arith_tasks() -> list[dict]:
    from evolvekit.config import load_config
    from evolvekit.env.registry import env_tasks

    cfg = load_config("configs/quickstart.yaml")
    return [t.model_dump(mode="json") for t in env_tasks(cfg.env, "test")[:50]]


class Soak:
    def __init__(self, url: str, tasks: list[dict], stop_at: float, seed: int) -> None:
        self.url, self.tasks, self.stop_at = url, tasks, stop_at
        self.rng = random.Random(seed)
        self.status: collections.Counter = collections.Counter()  # (kind, status)
        self.errors: collections.Counter = collections.Counter()  # client-side exceptions by kind
        self.lock = threading.Lock()

    def _count(self, kind: str, status: int) -> None:
        with self.lock:
            self.status[(kind, status)] += 1

    def _post(self, c: httpx.Client, kind: str, path: str, **kw) -> httpx.Response | None:
        try:
            r = c.post(self.url + path, **kw)
        except httpx.HTTPError as err:
            with self.lock:
                self.errors[(kind, type(err).__name__)] += 1
            return None
        self._count(kind, r.status_code)
        return r

    def episode(self, c: httpx.Client) -> None:
        task = self.rng.choice(self.tasks)
        r = self._post(c, "create", "/create", json={"env": "bfcl", "task": task}, headers=H)
        if r is None or r.status_code != 200:
            return
        iid = r.json()["instance_id"]
        try:
            for _ in range(self.rng.randint(1, 3)):
                call = {"name": "add", "arguments": {"a": self.rng.randint(1, 99), "b": self.rng.randint(1, 99)}}
                self._post(c, "step", "/step", json={"instance_id": iid, "action": {"tool_calls": [call]}}, headers=H)
            self._post(c, "step", "/step", json={"instance_id": iid, "action": {"text": "done"}}, headers=H)
            self._post(c, "evaluate", "/evaluate", json={"instance_id": iid}, headers=H)
        finally:
            self._post(c, "release", "/release", json={"instance_id": iid}, headers=H)

    def hostile(self, c: httpx.Client) -> None:
        task = dict(self.rng.choice(self.tasks))
        kind = self.rng.choice(
            [
                "oversized",
                "deep",
                "host",
                "text_plain",
                "unserved",
                "turns",
                "calls",
                "call_cap",
                "bad_field",
                "unknown_id",
            ]  # fmt: skip
        )
        if kind == "oversized":
            self._post(c, kind, "/create", content=b'{"env": "' + b"x" * 3_000_000 + b'"}',
                       headers={**H, "Content-Type": "application/json"})  # fmt: skip
        elif kind == "deep":
            self._post(c, kind, "/create", content=b"[" * 10_000 + b"]" * 10_000,
                       headers={**H, "Content-Type": "application/json"})  # fmt: skip
        elif kind == "host":
            self._post(c, kind, "/create", json={"env": "bfcl"}, headers={**H, "Host": "attacker.example"})
        elif kind == "text_plain":
            self._post(c, kind, "/create", content=b'{"env": "bfcl"}', headers={**H, "Content-Type": "text/plain"})
        elif kind == "unserved":
            self._post(c, kind, "/create", json={"env": "scienceworld"}, headers=H)
        elif kind == "turns":
            task["query"] = ["add 1 and 2"] * 2_000
            task["reference_solution"] = [[{"name": "add", "arguments": {"a": 1, "b": 2}}]] * 2_000
            self._post(c, kind, "/create", json={"env": "bfcl", "task": task}, headers=H)
        elif kind in ("calls", "call_cap"):  # 30,000 calls (1.4 MB: over a step's body limit), or 300 (over the cap)
            r = self._post(c, "create", "/create", json={"env": "bfcl", "task": task}, headers=H)
            if r is not None and r.status_code == 200:
                iid = r.json()["instance_id"]
                calls = [{"name": "add", "arguments": {"a": 1, "b": 2}}] * (30_000 if kind == "calls" else 300)
                self._post(c, kind, "/step", json={"instance_id": iid, "action": {"tool_calls": calls}}, headers=H)
                self._post(c, "release", "/release", json={"instance_id": iid}, headers=H)
        elif kind == "bad_field":
            task["initial_config"] = ["not", "an", "object"]
            self._post(c, kind, "/create", json={"env": "bfcl", "task": task}, headers=H)
        else:
            self._post(c, kind, "/step", json={"instance_id": "nope", "action": {"text": "x"}}, headers=H)

    def client(self) -> None:
        with httpx.Client(timeout=60) as c:
            while time.monotonic() < self.stop_at:
                (self.episode if self.rng.random() < 0.6 else self.hostile)(c)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--warmup-minutes", type=float, default=1.0, help="memory 'at start' is read after this")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "evolvekit.cli.main", "env", "serve", "--env", "bfcl", "--port", str(port)]
    server = subprocess.Popen(cmd, env={**os.environ, "EVOLVEKIT_ENV_TOKEN": TOKEN}, stdout=subprocess.DEVNULL)
    proc = psutil.Process(server.pid)
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        tasks = _arith_tasks()
        t0 = time.monotonic()
        stop_at = t0 + args.minutes * 60
        soaks = [Soak(url, tasks, stop_at, seed=i) for i in range(args.clients)]
        threads = [threading.Thread(target=s.client, daemon=True) for s in soaks]
        for t in threads:
            t.start()
        # the probe runs in a process of its own: in this one it would wait for the 32 client threads' GIL and
        # time them, not the server
        probe_out = Path(tempfile.mkdtemp()) / "healthz.json"
        probe = multiprocessing.get_context("spawn").Process(
            target=_probe,
            args=(url, time.time() - (time.monotonic() - t0), time.time() + stop_at - time.monotonic(), str(probe_out)),
        )
        probe.start()
        rss_start = None
        while time.monotonic() < stop_at:
            if rss_start is None and time.monotonic() - t0 >= args.warmup_minutes * 60:
                rss_start = proc.memory_info().rss
            time.sleep(0.5)
        probe.join(timeout=60)
        lat: list[tuple[float, float]] = [tuple(x) for x in json.loads(probe_out.read_text())]  # type: ignore[misc]
        for t in threads:
            t.join(timeout=120)
        time.sleep(1)
        rss_end = proc.memory_info().rss
        live = httpx.get(url + "/healthz", timeout=5).json()["instances"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    status: collections.Counter = collections.Counter()
    errors: collections.Counter = collections.Counter()
    for s in soaks:
        status.update(s.status)
        errors.update(s.errors)
    ms = sorted(v for _, v in lat)

    def q(values: list[float], p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")

    per_min = collections.defaultdict(list)
    for sec, v in lat:
        per_min[int(sec // 60)].append(v)
    rss_start = rss_start or rss_end
    growth = (rss_end - rss_start) / rss_start
    fives = sum(n for (_, code), n in status.items() if code >= 500)
    lines = [
        f"$ .venv/bin/python benchmarks/audits/soak_env_service.py --minutes {args.minutes:g} --clients {args.clients}"
        f"   # code: commit {_commit()}",
        "",
        f"# Soak of `env serve`: {args.clients} clients, {args.minutes:g} min, 60% normal episodes, 40% hostile",
        "",
        f"- /healthz latency: p50 {q(ms, 0.5):.1f} ms, p99 {q(ms, 0.99):.1f} ms, max {ms[-1]:.1f} ms "
        f"({len(ms)} probes); worst minute's p99 {max(q(sorted(v), 0.99) for v in per_min.values()):.1f} ms",
        f"- server memory: {rss_start / 2**20:.0f} MiB after {args.warmup_minutes:g} min, {rss_end / 2**20:.0f} MiB at "
        f"the end ({growth:+.1%})",
        f"- leaked instances: {live}",
        f"- HTTP 5xx: {fives}",
        "",
        "| minute | /healthz p50 ms | p99 ms | max ms |",
        "|---|---|---|---|",
    ]
    for m in sorted(per_min):
        v = sorted(per_min[m])
        lines.append(f"| {m} | {q(v, 0.5):.1f} | {q(v, 0.99):.1f} | {v[-1]:.1f} |")
    lines += ["", "| request kind | status | count |", "|---|---|---|"]
    lines += [f"| {k} | {code} | {n} |" for (k, code), n in sorted(status.items())]
    if errors:
        lines += ["", "Client-side errors: " + json.dumps({f"{k}/{e}": n for (k, e), n in errors.items()})]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


def _probe(url: str, start_wall: float, stop_wall: float, out: str) -> None:
    """Time GET /healthz every 0.2 s until the wall-clock ``stop_wall``; write [(seconds since the soak began, ms)]."""
    lat, start = [], start_wall
    with httpx.Client(timeout=5) as c:
        while time.time() < stop_wall:
            t = time.monotonic()
            try:
                c.get(url + "/healthz")
                lat.append((time.time() - start, (time.monotonic() - t) * 1000))
            except httpx.HTTPError:
                lat.append((time.time() - start, 5000.0))
            time.sleep(0.2)
    Path(out).write_text(json.dumps(lat))


def _commit() -> str:
    from evolvekit.provenance import code_commit

    return code_commit()


if __name__ == "__main__":
    main()
