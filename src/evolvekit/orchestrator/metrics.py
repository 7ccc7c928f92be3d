"""Metric sinks: JSONL (one line per iteration), TensorBoard event files, and a learning-curve PNG.

The run store is the source of truth; the JSONL and PNG are rewritten from it after every iteration, so a
resumed run never duplicates or loses a line. TensorBoard purges steps at or after the resume point.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

from evolvekit.agent.evaluate import avg_at_k, best_at_k
from evolvekit.types import Trajectory

log = logging.getLogger(__name__)


def rollout_metrics(
    trajectories: Sequence[Trajectory], success_threshold: float = 0.5, prefix: str = "rollout/"
) -> dict[str, float]:
    """Reward, success (``Trajectory.succeeded`` at reward.success_threshold), parse rate, steps and token counts
    over a batch of trajectories."""
    if not trajectories:
        return {}
    n = len(trajectories)
    steps = [s for t in trajectories for s in t.steps]
    rewards = [float(t.outcome_reward or 0.0) for t in trajectories]
    by_task: dict[str, list[float]] = {}
    for t, r in zip(trajectories, rewards):
        by_task.setdefault(t.task_id, []).append(r)
    return {
        prefix + "reward_mean": sum(rewards) / n,
        prefix + "success_rate": sum(t.succeeded(success_threshold) for t in trajectories) / n,
        prefix + "best_of_group": best_at_k(list(by_task.values())),
        prefix + "avg_of_group": avg_at_k(list(by_task.values())),
        prefix + "steps_mean": len(steps) / n,
        prefix + "parse_error_rate": (sum(s.parse_error is not None for s in steps) / len(steps)) if steps else 0.0,
        prefix + "tool_call_rate": (sum(bool(s.tool_calls) for s in steps) / len(steps)) if steps else 0.0,
        prefix + "truncated_rate": sum(t.flags.truncated for t in trajectories) / n,
        prefix + "failed": float(sum(t.flags.failed for t in trajectories)),
        prefix + "prompt_tokens": float(sum(t.prompt_tokens for t in trajectories)),
        prefix + "completion_tokens": float(sum(t.completion_tokens for t in trajectories)),
    }


class MetricsSink:
    def __init__(self, run_dir: Path, start_iteration: int, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"), purge_step=start_iteration)
            except ImportError:  # pragma: no cover - tensorboard is a core dependency
                log.warning("tensorboard is not installed; no event files are written")

    def write(
        self,
        iteration: int,
        metrics: dict[str, float],
        all_metrics: dict[int, dict[str, float]],
        evaluations: dict[str, dict],
    ) -> None:
        if self.writer is not None:
            for k, v in metrics.items():
                self.writer.add_scalar(k, v, iteration)
            self.writer.flush()
        with open(self.run_dir / "metrics.jsonl", "w") as fh:
            for it in sorted(all_metrics):
                fh.write(json.dumps({"iteration": it, **all_metrics[it]}) + "\n")
        self.plot(all_metrics, evaluations)

    def plot(self, all_metrics: dict[int, dict[str, float]], evaluations: dict[str, dict]) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        its = sorted(all_metrics)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(
            its, [all_metrics[i].get("rollout/success_rate", 0.0) for i in its], "o-", label="train rollouts: success"
        )
        ax.plot(
            its,
            [all_metrics[i].get("rollout/reward_mean", 0.0) for i in its],
            ".--",
            alpha=0.6,
            label="train rollouts: reward",
        )
        eval_its = [i for i in its if any(k.startswith("eval/avg@") for k in all_metrics[i])]
        if eval_its:
            key = next(k for k in all_metrics[eval_its[0]] if k.startswith("eval/avg@"))
            ax.plot(eval_its, [all_metrics[i][key] for i in eval_its], "s-", label=f"held-out {key[5:]}")
        for phase, marker, x in (("before", "^", -0.5), ("after", "v", (its[-1] + 0.5) if its else 0.5)):
            ev = evaluations.get(phase)
            if ev:
                avg = next((k for k in ev if k.startswith("avg@")), None)
                if avg:
                    ax.plot([x], [ev[avg]], marker, markersize=10, label=f"held-out {avg} {phase}")
        ax.set_xlabel("iteration")
        ax.set_ylabel("rate")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        ax.set_title(self.run_dir.name)
        path = self.run_dir / "learning_curve.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
