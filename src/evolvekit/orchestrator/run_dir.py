"""The run folder: a new one (its config and store, refused before any folder is made when the config cannot train
or names what no registry knows), or an existing one to resume (its stored config wins; only resumable fields may
change), and the newest intact checkpoint to resume from."""

from __future__ import annotations

import fcntl
import json
import logging
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import IO

from rich.console import Console

from evolvekit.config import (
    RESUMABLE_FIELDS,
    Config,
    advantage_estimator,
    apply_override,
    attribution_source,
    config_differences,
    config_from_dict,
    helper_sources,
    migrate_stored,
    training_problem,
)
from evolvekit.errors import ConfigError
from evolvekit.provenance import code_commit
from evolvekit.store.sqlite import RunStore

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
STORE_FILE = "run.sqlite"
LOCK_FILE = "run.lock"
# the tables a run's store has from its first write; a store to resume without them is not a run's
_RUN_TABLES = {"meta", "iterations", "trajectories"}


def lock_run_dir(run_dir: Path) -> IO:
    """An exclusive lock on ``run_dir`` for this process (released when the returned file closes, or the process
    ends, also by kill -9): two processes writing one run would interleave its history."""
    handle = open(run_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held until the run's store closes
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigError(
            f"{run_dir} is in use by another process (a run or --resume of it is still going); wait for it or stop it"
        ) from None
    return handle


def check_store(path: Path) -> None:
    """A store to resume is a run's SQLite database, intact: an emptied, truncated or foreign file is refused with
    one line (resuming from it would start over, or fail deep inside), and nothing is written to it."""
    if path.stat().st_size == 0:
        raise ConfigError(f"{path}: empty (0 bytes); the run's store is lost, so there is nothing to resume")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
        try:
            verdict = con.execute("PRAGMA quick_check(1)").fetchone()[0]
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.DatabaseError as err:
        raise ConfigError(f"{path}: damaged ({err}); nothing was changed") from None
    if verdict != "ok":
        raise ConfigError(f"{path}: damaged ({str(verdict)[:200]}); nothing was changed")
    if not _RUN_TABLES <= tables:
        raise ConfigError(f"{path}: not a run's store (no {', '.join(sorted(_RUN_TABLES - tables))} table)")


def leads_out(run_dir: Path) -> Path | None:
    """The first of the run's own paths a resume writes to (its config, store, ``checkpoints/`` and each entry in
    it) that is a symlink resolving outside ``run_dir``; None if none is."""
    root = run_dir.resolve()
    ckpts = run_dir / "checkpoints"
    entries = [run_dir / CONFIG_FILE, run_dir / STORE_FILE, ckpts]
    if ckpts.is_dir():
        entries += sorted(ckpts.iterdir())
    for path in entries:
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            return path
    return None


def new_run_dir(cfg: Config) -> Path:
    base = Path(cfg.run.out_dir) / f"{cfg.run.name}-{datetime.now():%Y%m%d-%H%M%S}"
    path, i = base, 1
    while path.exists():
        path, i = base.with_name(f"{base.name}-{i}"), i + 1
    return path


def open_run(
    cfg: Config | None,
    resume: Path | None,
    fixed_dir: Path | None = None,
    overrides: list[str] | None = None,
    lock: bool = True,
) -> tuple[Config, Path, RunStore]:
    """A new run directory (``cfg``; named after the run and the time, or ``fixed_dir``), or an existing one to
    resume (its stored config wins; ``cfg``, or ``overrides`` of the stored config, may extend it: _resumed_config).
    A config that cannot train is refused before any folder is made. The folder is locked until the store closes
    (``lock=False``: a process that joins a run another holds, such as a data-parallel rank, or only reads it)."""
    if resume is not None:
        resume = Path(resume)
        if not (resume / CONFIG_FILE).is_file() or not (resume / STORE_FILE).is_file():
            raise ConfigError(f"{resume} is not a run directory (no {CONFIG_FILE} / {STORE_FILE})")
        escaping = leads_out(resume)
        if escaping is not None:
            raise ConfigError(
                f"--resume {resume}: {escaping} is a symlink leading out of the run folder; a run writes only in its "
                "own folder (replace the link with the folder itself)"
            )
        try:
            stored = config_from_dict(
                migrate_stored(json.loads((resume / CONFIG_FILE).read_text())), str(resume / CONFIG_FILE)
            )
        except (ValueError, OSError) as err:
            raise ConfigError(f"{resume / CONFIG_FILE}: unreadable ({type(err).__name__})") from None
        if cfg is None and overrides:
            data = stored.model_dump(mode="json")
            for assignment in overrides:
                apply_override(data, assignment)
            cfg = config_from_dict(data, f"{resume / CONFIG_FILE} (with --set overrides)")
        held = lock_run_dir(resume) if lock else None
        try:
            check_store(resume / STORE_FILE)
            store = RunStore(resume / STORE_FILE)
        except BaseException:
            if held is not None:
                held.close()
            raise
        if held is not None:
            store.hold_until_closed(held)
        if cfg is not None:
            try:
                stored = _resumed_config(stored, cfg, resume, store)
            except BaseException:
                store.close()
                raise
        return stored, resume, store
    if cfg is None:
        raise ConfigError("give a config file, or --resume RUN_DIR")
    problem = training_problem(cfg)
    if problem is not None:
        raise ConfigError(problem)
    problem = registry_problem(cfg)  # an unknown environment or estimator is named now, before any folder or model
    if problem is not None:
        raise ConfigError(problem)
    run_dir = Path(fixed_dir) if fixed_dir is not None else new_run_dir(cfg)
    try:
        run_dir.mkdir(parents=True, exist_ok=fixed_dir is not None)
        (run_dir / CONFIG_FILE).write_text(cfg.model_dump_json(indent=2))
    except OSError as err:
        raise ConfigError(f"run.out_dir: cannot create the run folder {run_dir}: {err.strerror or err}") from None
    new_lock = lock_run_dir(run_dir)
    store = RunStore(run_dir / STORE_FILE)
    store.hold_until_closed(new_lock)
    store.set_meta("config", cfg.model_dump_json())
    store.set_meta("helper_sources", json.dumps(helper_sources(cfg)))  # what each helper role's 'auto' became
    store.set_meta("created", datetime.now().isoformat(timespec="seconds"))
    store.set_meta("code", code_commit())  # the commit of the code that made the run (results files name it)
    return cfg, run_dir, store


def _resumed_config(stored: Config, wanted: Config, run_dir: Path, store: RunStore) -> Config:
    """A resumed run keeps its stored config; ``wanted`` (the CONFIG or --set given with --resume) may only change
    RESUMABLE_FIELDS, and train.iterations only upwards: a finished run is extended by the iterations added (its
    final evaluation is dropped and made again at the new end). Anything else is refused, naming the fields, not
    ignored."""
    changed = config_differences(stored, wanted)
    other = [f for f in changed if f not in RESUMABLE_FIELDS]
    if other:
        shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
        raise ConfigError(
            f"--resume {run_dir}: a resumed run keeps its stored config ({CONFIG_FILE}); the config given differs in "
            f"{shown}. Only {', '.join(RESUMABLE_FIELDS)} may change (train.iterations upwards, to extend it)"
        )
    if wanted.train.iterations < stored.train.iterations:
        raise ConfigError(
            f"train.iterations: {wanted.train.iterations} is fewer than the run's {stored.train.iterations}; "
            "a resumed run can only be extended"
        )
    if not changed:
        return stored
    if wanted.train.iterations > stored.train.iterations:
        log.info("extending %s from %d to %d iterations", run_dir, stored.train.iterations, wanted.train.iterations)
        store.rollback_after(stored.train.iterations - 1)  # keeps every iteration; drops the final evaluation
    (run_dir / CONFIG_FILE).write_text(wanted.model_dump_json(indent=2))
    store.set_meta("config", wanted.model_dump_json())
    return wanted


def intact_checkpoint(store: RunStore, console: Console | None = None):
    """The newest checkpoint whose files match their checksums. Newer, damaged ones are reported in one line each
    and the store is rolled back to the intact one, so the iterations after it run again."""
    from evolvekit.train.checkpoint import checkpoint_problem

    rows = store.checkpoints()
    for i in range(len(rows) - 1, -1, -1):
        problem = checkpoint_problem(Path(rows[i].path))
        if problem is None:
            if i < len(rows) - 1:
                store.rollback_after(rows[i].iteration)
            return rows[i]
        fallback = Path(rows[i - 1].path).name if i else "the initial policy"
        line = f"checkpoint {rows[i].path} is damaged ({problem}); resuming from {fallback}"
        log.warning(line)
        if console is not None:
            console.print(f"[yellow]{line}[/yellow]")
    if rows:  # none intact: start over from the initial policy (and the cold start, if any)
        store.rollback_after(-2)
    return None


def registry_problem(cfg: Config, training: bool = True) -> str | None:
    """What the registries say of ``cfg``, once ``env.plugins`` are imported (they may register environments,
    advantage estimators and step-credit sources): an unknown ``env.name`` (unless a service provides it) or, for
    training, an unknown ``train.advantage_estimator`` or ``attributing.source``; or a rule of the rollout engine
    (``engine/registry.py: engine_problem``: for evaluation, those of the engine `eval` builds), as one line; else
    None. `run`, `eval` and `config validate` all ask it."""
    import evolvekit.attributing.estimators  # noqa: F401 - registers dual_channel and gigpo
    from evolvekit.attributing.sources import STEP_CREDIT
    from evolvekit.engine.registry import engine_problem
    from evolvekit.env.registry import available_envs, load_plugins
    from evolvekit.train.advantages import ADVANTAGE_ESTIMATORS

    load_plugins(cfg.env.plugins)
    remote = cfg.env.service_url is not None  # an environment the service at env.service_url provides
    if not remote and cfg.env.name not in available_envs():
        return f"env.name: unknown environment '{cfg.env.name}' (evolvekit env list; env.plugins)"
    name = advantage_estimator(cfg)
    if training and name not in ADVANTAGE_ESTIMATORS:
        known = ", ".join(sorted(ADVANTAGE_ESTIMATORS))
        return f"train.advantage_estimator: unknown estimator '{name}' (registered: {known}; env.plugins)"
    source = attribution_source(cfg)
    if training and cfg.attributing.enabled and source != "gigpo" and source not in STEP_CREDIT:
        known = ", ".join(sorted([*STEP_CREDIT, "gigpo"]))
        return f"attributing.source: unknown step-credit source '{source}' (registered: {known}; env.plugins)"
    return engine_problem(cfg, training)
