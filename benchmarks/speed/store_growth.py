"""How a run's store grows with the length of its episodes: bytes per stored trajectory for episodes of N steps,
as the store writes them (store/codec.py) against whole prompts per step (how schema 1 stored them).

    .venv/bin/python benchmarks/speed/store_growth.py --steps 4 8 16 32

Episodes are real rollouts (agent/rollout.py) on the real BFCL file-system backend (`fs_chain` family, real
context template, the embedded model's real tokenizer and chat template) written to a real run store; only the
actions are scripted (a listing and a folder change, alternating), because the embedded policy answers after a
few steps and the point here is the episode's length, not its quality. Linear growth: the bytes per step stay
flat as N doubles; quadratic growth: they double.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


class ScriptedActions:
    """The embedded model's tokenizer and chat template, with every action scripted (lock-step rollouts)."""

    def __init__(self, llm, actions: list[str]) -> None:
        self.llm, self.actions, self.calls = llm, actions, 0

    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> list[int]:
        return self.llm.apply_chat_template(messages, add_generation_prompt)

    def decode(self, token_ids) -> str:
        return self.llm.decode(token_ids)

    def encode(self, text: str) -> list[int]:
        return self.llm.encode(text)

    def generate_ids(self, prompts, params):
        from evolvekit.llm.base import Completion

        out = []
        for p in prompts:
            text = self.actions[self.calls % len(self.actions)]
            self.calls += 1
            ids = self.llm.encode(text)
            out.append([Completion(text=text, token_ids=ids, logprobs=[0.0] * len(ids), prompt_token_ids=list(p))])
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--episodes", type=int, default=4)
    args = ap.parse_args()

    from evolvekit.agent.rollout import RolloutJob, run_rollouts
    from evolvekit.config import EnvConfig, ModelConfig, RolloutConfig
    from evolvekit.engine.base import Engine
    from evolvekit.env.bfcl.families import get_family
    from evolvekit.env.registry import make_env
    from evolvekit.llm.base import SamplingParams
    from evolvekit.llm.factory import build_llm
    from evolvekit.store.sqlite import RunStore

    llm = build_llm(ModelConfig())
    actions = ['<tool_call>{"name": "ls", "arguments": {}}</tool_call>']
    actions.append('<tool_call>{"name": "cd", "arguments": {"folder": "workspace"}}</tool_call>')
    scripted = ScriptedActions(llm, actions)
    env_cfg = EnvConfig(name="bfcl", family="fs_chain")
    task = get_family("fs_chain").tasks("train", 1)[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.steps:
            trajs = run_rollouts(
                [RolloutJob(task=task) for _ in range(args.episodes)],
                lambda: make_env(env_cfg),
                Engine(scripted),
                RolloutConfig(max_steps=n, concurrency=args.episodes),
                SamplingParams(max_new_tokens=64),
                show_progress=False,
            )
            store = RunStore(Path(tmp) / f"run-{n}.sqlite")
            with store.transaction() as c:
                store.put_trajectories(c, trajs, 0, "train")
            stored = sum(len(r[0]) for r in store._conn.execute("SELECT json FROM trajectories"))
            assert store.trajectories(0) == trajs  # the stored episodes decode to exactly what was rolled out
            store.close()
            whole = sum(len(t.model_dump_json()) for t in trajs)
            steps = sum(len(t.steps) for t in trajs)
            rows.append((n, steps / len(trajs), stored / len(trajs), whole / len(trajs), stored / steps, whole / steps))
    print(
        "| max steps | steps per episode | stored bytes per episode | whole-prompt bytes | stored per step | "
        "whole-prompt per step |"
    )
    print("|---|---|---|---|---|---|")
    for n, s, a, b, ps, pw in rows:
        print(f"| {n} | {s:.1f} | {a:,.0f} | {b:,.0f} | {ps:,.0f} | {pw:,.0f} |")
    first, last = rows[0], rows[-1]
    growth = last[1] / first[1]
    print(
        f"\nepisode {growth:.0f}x longer: stored bytes x{last[2] / first[2]:.1f} (linear: x{growth:.0f}), "
        f"whole prompts x{last[3] / first[3]:.1f} (quadratic: ~x{growth**2:.0f})"
    )


if __name__ == "__main__":
    main()
