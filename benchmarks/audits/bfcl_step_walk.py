"""A writing BFCL step on a file system at the state cap: the kept record (env/bfcl/fs_leaves.py) against the walk.

    .venv/bin/python benchmarks/audits/bfcl_step_walk.py [--folders 40 --files 240 --steps 9]

Issue 52: step grounding compares a backend's state before and after a step. Read-only calls and untouched backends
walk nothing; a writing file-system call re-walks only what it changed (the record, ``FsLeaves``); a writing call
to another backend walks that backend once (``_state_leaves``, one pass over its objects). This builds a sandbox
file system of ``--folders`` x ``--files`` files (the default, 40 x 240, is an initial state of about 19,300
values, just under ``MAX_CONFIG_LEAVES`` = 20,000, and 77,000 state leaves), then times ``--steps`` writing steps
(one ``touch`` each, then as many ``echo`` into a file) three ways in one process, alternating twice: with the
record, with the one-pass walk of the whole backend (the record switched off for the episode), and with its plain
definition ``_plain_leaves`` (``_plain`` copy, then its leaves); prints each median and the ratios.
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

    def median_step(way: str, name: str) -> tuple[float, int]:
        bfcl_env._state_leaves = plain if way == "copy-then-walk" else one_pass  # what a touched backend walks
        env = bfcl_env.BfclEnv()
        env.reset(None, {"classes": ["GorillaFileSystem"], "initial_config": config})
        env.step(Action(tool_calls=[ToolCall(name="cd", arguments={"folder": "d0"})], text=""))  # the whole walk
        if way != "record":
            env._fs_leaves = None  # the touched backend is walked whole at each writing step
        times = []
        for k in range(args.steps):
            arguments = {"file_name": f"new{k}.txt"} if name == "touch" else {"content": f"v{k}", "file_name": "f1.txt"}
            call = ToolCall(name=name, arguments=arguments)
            start = time.perf_counter()
            res = env.step(Action(tool_calls=[call], text=""))
            times.append(time.perf_counter() - start)
            assert res.call_results[0].ok and res.grounding is not None and res.grounding.state_changed
        leaves = len(one_pass(env.instances))
        env.close()
        return statistics.median(times), leaves

    ways = ("copy-then-walk", "one-pass", "record")
    got: dict[tuple[str, str], list[float]] = {(w, n): [] for n in ("touch", "echo") for w in ways}
    leaves = 0
    for _ in range(2):
        for way, name in got:
            t, leaves = median_step(way, name)
            got[(way, name)].append(t)
    bfcl_env._state_leaves = one_pass
    values = bfcl_env._leaf_count(config, 10**9)
    print(f"initial state: {values} values (cap {bfcl_env.MAX_CONFIG_LEAVES}); state leaves: {leaves}")
    for (way, name), ts in got.items():
        runs = [round(t * 1000, 2) for t in ts]
        print(f"{way}: `{name}` step median {statistics.median(ts) * 1000:.2f} ms (runs: {runs})")
    for name in ("touch", "echo"):
        record = statistics.median(got[("record", name)])
        for way in ways[:2]:
            ratio = statistics.median(got[(way, name)]) / record
            print(f"`{name}`: the record is {ratio:.1f}x the speed of {way}")


if __name__ == "__main__":
    main()
