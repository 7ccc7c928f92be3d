"""A writing BFCL step on a file system at the state cap: the one-pass state walk against copy-then-walk.

    .venv/bin/python benchmarks/bfcl_step_walk.py [--folders 40 --files 240 --steps 9]

Issue 52: step grounding walks a backend that a writing call touched (read-only calls and untouched backends walk
nothing). This builds a sandbox file system of ``--folders`` x ``--files`` files (the default, 40 x 240, is an
initial state of about 19,300 values, just under ``MAX_CONFIG_LEAVES`` = 20,000, and 77,000 state leaves), then
times ``--steps`` writing steps (one ``touch`` each) with the state walk ``env/bfcl/env.py: _state_leaves`` (one
pass over the objects) and with its plain definition ``_plain_leaves`` (``_plain`` copy, then its leaves), in one
process, alternating twice; prints each median and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folders", type=int, default=40)
    ap.add_argument("--files", type=int, default=240)
    ap.add_argument("--steps", type=int, default=9)
    args = ap.parse_args()

    import evolvekit.env.bfcl.env as bfcl_env
    from evolvekit.env.base import Action
    from evolvekit.types import ToolCall

    files = {f"f{j}.txt": {"type": "file", "content": f"x{j}"} for j in range(args.files)}
    folders = {f"d{i}": {"type": "directory", "contents": dict(files)} for i in range(args.folders)}
    config = {"GorillaFileSystem": {"root": {"w": {"type": "directory", "contents": folders}}}}
    one_pass, plain = bfcl_env._state_leaves, bfcl_env._plain_leaves

    def median_step(walk) -> tuple[float, int]:
        bfcl_env._state_leaves = walk  # what _step_grounding calls for a touched backend
        env = bfcl_env.BfclEnv()
        env.reset(None, {"classes": ["GorillaFileSystem"], "initial_config": config})
        env.step(Action(tool_calls=[ToolCall(name="pwd", arguments={})], text=""))  # the once-per-episode walk
        times = []
        for k in range(args.steps):
            call = ToolCall(name="touch", arguments={"file_name": f"new{k}.txt"})
            start = time.perf_counter()
            env.step(Action(tool_calls=[call], text=""))
            times.append(time.perf_counter() - start)
        leaves = len(one_pass(env.instances))
        env.close()
        return statistics.median(times), leaves

    got: dict[str, list[float]] = {"one-pass": [], "copy-then-walk": []}
    leaves = 0
    for _ in range(2):
        for name, walk in (("copy-then-walk", plain), ("one-pass", one_pass)):
            t, leaves = median_step(walk)
            got[name].append(t)
    bfcl_env._state_leaves = one_pass
    values = bfcl_env._leaf_count(config, 10**9)
    print(f"initial state: {values} values (cap {bfcl_env.MAX_CONFIG_LEAVES}); state leaves: {leaves}")
    for name, ts in got.items():
        runs = [round(t * 1000, 1) for t in ts]
        print(f"{name}: writing step median {statistics.median(ts) * 1000:.1f} ms (runs: {runs})")
    ratio = statistics.median(got["copy-then-walk"]) / statistics.median(got["one-pass"])
    print(f"one-pass is {ratio:.2f}x the speed of copy-then-walk")


if __name__ == "__main__":
    main()
