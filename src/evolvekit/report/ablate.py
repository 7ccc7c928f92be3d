"""``evolvekit ablate configs/ablation.yaml``: the rows of AgentEvolver's Table 1 (and friends) over several seeds.

The ablation file names a base config, budget overrides shared by every row, the seeds, and the rows (each a
name and its overrides). Each (row, seed) is one ordinary run under ``out_dir/<row>/seed<k>``; a finished one
(summary.json present) is skipped and an unfinished one is resumed, so the whole table can be interrupted and
continued. The result is ``results.md`` / ``results.json``: held-out avg@k / best@k after training, mean ± std over
seeds (the base-model row evaluates without training).
"""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from evolvekit.config import load_config
from evolvekit.errors import ConfigError

log = logging.getLogger(__name__)


class AblationRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    overrides: list[str] = Field(default_factory=list)


class AblationSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base: str
    out_dir: str = "runs/ablation"
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    budget: list[str] = Field(default_factory=list)  # overrides shared by every row (iterations, tasks, eval size)
    rows: list[AblationRow]


def load_spec(path: Path) -> AblationSpec:
    try:
        data = yaml.safe_load(Path(path).read_text())
        return AblationSpec.model_validate(data)
    except FileNotFoundError:
        raise ConfigError(f"ablation file not found: {path}") from None
    except Exception as err:
        raise ConfigError(f"{path}: {str(err).splitlines()[0]}") from None


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def run_ablation(spec_path: Path, only: list[str] | None = None) -> Path:
    from evolvekit.orchestrator.build import build_loop, open_run

    spec = load_spec(spec_path)
    base = Path(spec_path).parent / spec.base if not Path(spec.base).is_file() else Path(spec.base)
    out = Path(spec.out_dir)
    results: dict[str, dict] = {}
    for row in spec.rows:
        if only and row.name not in only:
            continue
        per_seed = []
        for seed in spec.seeds:
            run_dir = out / row.name / f"seed{seed}"
            summary_file = run_dir / "summary.json"
            if not summary_file.is_file():
                if (run_dir / "run.sqlite").is_file():
                    cfg, rd, store = open_run(None, run_dir)
                else:
                    cfg = load_config(base, [*spec.budget, *row.overrides, f"run.seed={seed}", f"run.name={row.name}"])
                    run_dir.mkdir(parents=True, exist_ok=True)
                    cfg, rd, store = _open_fixed(cfg, run_dir)
                try:
                    build_loop(cfg, rd, store, show_progress=False).run()
                finally:
                    store.close()
            per_seed.append(json.loads(summary_file.read_text()))
        results[row.name] = _aggregate(per_seed)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(markdown_table(results, spec))
    return out / "results.md"


def _open_fixed(cfg, run_dir: Path):
    """Like open_run, but in a fixed directory (so the table can find and resume it)."""
    from evolvekit.orchestrator.build import CONFIG_FILE, STORE_FILE
    from evolvekit.store.sqlite import RunStore

    (run_dir / CONFIG_FILE).write_text(cfg.model_dump_json(indent=2))
    store = RunStore(run_dir / STORE_FILE)
    store.set_meta("config", cfg.model_dump_json())
    return cfg, run_dir, store


def _aggregate(summaries: list[dict]) -> dict:
    out: dict = {"seeds": len(summaries)}
    for phase in ("eval_before", "eval_after"):
        evs = [s.get(phase) or {} for s in summaries]
        keys = sorted({k for ev in evs for k in ev if "@" in k})
        for k in keys:
            m, sd = _mean_std([ev[k] for ev in evs if k in ev])
            out[f"{phase}/{k}"] = {"mean": m, "std": sd}
    return out


def markdown_table(results: dict[str, dict], spec: AblationSpec) -> str:
    keys = sorted({k for r in results.values() for k in r if k.startswith("eval_after/")})
    keys = keys or sorted({k for r in results.values() for k in r if k.startswith("eval_before/")})
    head = "| row | " + " | ".join(k.split("/", 1)[1] for k in keys) + " |"
    lines = [f"# Ablation ({len(spec.seeds)} seeds: {spec.seeds})", "", "budget: " + (", ".join(spec.budget) or "base config"),
             "", head, "|" + "---|" * (len(keys) + 1)]
    for name, r in results.items():
        cells = []
        for k in keys:
            v = r.get(k) or r.get(k.replace("eval_after", "eval_before"))
            cells.append(f"{v['mean']:.3f} ± {v['std']:.3f}" if v else "—")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
