"""``evolvekit ablate configs/evidence/ablation.yaml``: AgentEvolver's Table 1 rows (and friends) over several seeds.

The ablation file names a base config, budget overrides shared by every row, the seeds, and the rows (each a
name and its overrides). Each (row, seed) is one ordinary run under ``out_dir/<row>/seed<k>``; a finished one
(summary.json present) is skipped and an unfinished one is resumed, so the whole table can be interrupted and
continued. The result is ``results.md`` / ``results.json``: held-out avg@k / best@k after training, mean ± std over
seeds (the base-model row evaluates without training).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
import statistics
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from evolvekit.config import load_config
from evolvekit.errors import ConfigError
from evolvekit.safeyaml import load_yaml

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
    isolate: bool = True  # one spawned process per run: memory is freed between runs, a crash does not stop the table
    # delete a finished run's checkpoints/ (about 1.6 GB for the embedded 135M policy with its optimizer state); its
    # store, metrics and summary stay, and so does an unfinished run's checkpoint (it is resumed from it)
    drop_checkpoints: bool = False
    # the level of the evidence report's t-intervals (benchmarks/evidence/evidence.py): 0.975 for a second look at the
    # same data (two looks at 2.5% each, Bonferroni)
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    # the row whose lift over the base model (after − before) the evidence report expresses the others' lift as a
    # share of (e.g. GRPO on the person-written tasks); None = no such column
    lift_reference: str | None = None
    rows: list[AblationRow]


def load_spec(path: Path) -> AblationSpec:
    try:
        data = load_yaml(Path(path).read_text())
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
    spec = load_spec(spec_path)
    base = Path(spec_path).parent / spec.base if not Path(spec.base).is_file() else Path(spec.base)
    out = Path(spec.out_dir)
    rows = [row for row in spec.rows if not only or row.name in only]
    if only and (unknown := sorted(set(only) - {row.name for row in spec.rows})):
        raise ConfigError(
            f"{spec_path}: no row named {', '.join(unknown)} (rows: {', '.join(r.name for r in spec.rows)})"
        )
    configs = {}
    for row in rows:  # validate every row before the first (long) run starts
        for seed in spec.seeds:
            try:
                configs[row.name, seed] = load_config(
                    base, [*spec.budget, *row.overrides, f"run.seed={seed}", f"run.name={row.name}"]
                )
            except ConfigError as err:
                raise ConfigError(f"{spec_path}: row {row.name!r}: {err}") from None
    results: dict[str, dict] = {}
    failed: dict[str, str] = {}
    for row in rows:
        per_seed = []
        for seed in spec.seeds:
            run_dir = out / row.name / f"seed{seed}"
            summary_file = run_dir / "summary.json"
            if not summary_file.is_file():
                error = (
                    _run_isolated(configs[row.name, seed], run_dir)
                    if spec.isolate
                    else _run_one(configs[row.name, seed].model_dump_json(), str(run_dir))
                )
                if error:
                    log.error("ablation run %s failed: %s (the other runs go on; re-run to resume it)", run_dir, error)
                    failed[f"{row.name}/seed{seed}"] = error
            if summary_file.is_file():
                per_seed.append(json.loads(summary_file.read_text()))
                ckpt = run_dir / "checkpoints"
                if spec.drop_checkpoints and ckpt.is_dir() and not ckpt.is_symlink():  # a link's target is not ours
                    shutil.rmtree(ckpt)
        results[row.name] = {**_aggregate(per_seed), "seeds_total": len(spec.seeds)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({**results, "failed": failed} if failed else results, indent=2))
    (out / "results.md").write_text(markdown_table(results, spec))
    return out / "results.md"


ORPHAN_EXIT_CODE = 3


def exit_when_orphaned(parent_pid: int, interval_s: float = 1.0) -> threading.Thread:
    """Ends this process (exit code 3) once ``parent_pid`` is no longer its parent, checked every ``interval_s``.

    A run worker is a spawned child of the table's process; if that process is killed (SIGTERM, SIGKILL), the
    worker would otherwise go on alone, and a restarted table would then have two processes writing one run
    folder. The run store survives the hard exit (SQLite's journal), and the restarted table resumes the run
    from its last checkpoint.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        log.error("the ablation process %d is gone; this run worker (%d) stops too", parent_pid, os.getpid())
        os._exit(ORPHAN_EXIT_CODE)

    thread = threading.Thread(target=watch, name="exit-when-orphaned", daemon=True)
    thread.start()
    return thread


def _run_one(
    cfg_json: str, run_dir_str: str, log_level: int | None = None, parent_pid: int | None = None
) -> str | None:
    """One (row, seed) run, new or resumed; returns None, or the error that stopped it. ``parent_pid``: in a
    spawned worker, the table's process, whose death ends this one too."""
    from evolvekit.config import Config
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run

    if parent_pid is not None:
        exit_when_orphaned(parent_pid)
    if log_level is not None:  # in a spawned child: log like the parent
        from evolvekit.logs import setup_logging

        setup_logging(logging.getLevelName(log_level))
    run_dir = Path(run_dir_str)
    if (run_dir / "run.sqlite").is_file():
        cfg, rd, store = open_run(None, run_dir)
    else:  # a fixed directory, so the table can find and resume it
        cfg, rd, store = open_run(Config.model_validate_json(cfg_json), None, fixed_dir=run_dir)
    try:
        build_loop(cfg, rd, store, show_progress=False).run()
    except Exception as err:  # noqa: BLE001 - recorded; the table goes on
        log.exception("run %s failed", run_dir)
        return f"{type(err).__name__}: {err}"
    finally:
        store.close()
    return None


def _run_isolated(cfg, run_dir: Path) -> str | None:
    """``_run_one`` in a spawned process; a crash or kill (non-zero exit) is returned as an error."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(
                _run_one, cfg.model_dump_json(), str(run_dir), logging.getLogger().getEffectiveLevel(), os.getpid()
            ).result()
        except Exception as err:  # noqa: BLE001 - the child died (BrokenProcessPool) or could not be started
            return f"{type(err).__name__}: {err}"


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
    head = "| row | seeds | " + " | ".join(k.split("/", 1)[1] for k in keys) + " |"
    lines = [
        f"# Ablation ({len(spec.seeds)} seeds: {spec.seeds})",
        "",
        "budget: " + (", ".join(spec.budget) or "base config"),
        "",
        head,
        "|" + "---|" * (len(keys) + 2),
    ]
    for name, r in results.items():
        cells = []
        for k in keys:
            v = r.get(k) or r.get(k.replace("eval_after", "eval_before"))
            cells.append(f"{v['mean']:.3f} ± {v['std']:.3f}" if v else "—")
        done = f"{r.get('seeds', 0)}/{r.get('seeds_total', len(spec.seeds))}"
        lines.append(f"| {name} | {done} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
