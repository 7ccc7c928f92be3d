"""The run store: one SQLite database (WAL) per run directory.

It holds tasks, trajectories, steps, rewards, experiences, per-iteration metrics, evaluations and the checkpoint
index. Each stage of an iteration commits in one transaction, and an iteration is marked ``done`` in the same
transaction as its metrics and checkpoint row, so a crash (or ``kill -9``) at any point leaves the database at the
end of the last committed stage: ``evolvekit run --resume`` continues from there with nothing lost or duplicated.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, Sequence

from evolvekit.store.codec import decode_trajectory, encode_annotations, encode_trajectory
from evolvekit.types import Experience, Task, Trajectory

log = logging.getLogger(__name__)

# what a damaged row raises when parsed: bad JSON or text, a failed model validation, a mangled shared-prefix body
_DAMAGE = (ValueError, TypeError, KeyError, IndexError, UnicodeDecodeError)


class DamagedRows(Exception):
    """Some rows of a read could not be parsed (a damaged store); ``count`` of them."""

    def __init__(self, what: str, count: int) -> None:
        super().__init__(f"{count} damaged {what} rows")
        self.what, self.count = what, count


def _parse_rows(rows, parse, what: str, strict: bool = False) -> list:
    """Each row parsed; a damaged row is skipped with one warning for the read (issue 52: one damaged row must not
    make a run unresumable), or with ``strict`` the read raises DamagedRows."""
    out, damaged = [], 0
    for row in rows:
        try:
            out.append(parse(row))
        except _DAMAGE:
            damaged += 1
    if damaged:
        if strict:
            raise DamagedRows(what, damaged)
        log.warning("run store: skipped %d damaged %s rows", damaged, what)
    return out


# 2: trajectory bodies encoded by store/codec.py (prompts as shared prefix + new tokens), annotations apart
SCHEMA_VERSION = 2

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS iterations (
    iteration INTEGER PRIMARY KEY, status TEXT NOT NULL, started REAL, finished REAL);
CREATE TABLE IF NOT EXISTS tasks (
    task_id TEXT PRIMARY KEY, source TEXT NOT NULL, first_iteration INTEGER, json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trajectories (
    trajectory_id TEXT PRIMARY KEY, iteration INTEGER NOT NULL, phase TEXT NOT NULL, task_id TEXT NOT NULL,
    group_id TEXT, outcome_reward REAL, experience_guided INTEGER NOT NULL, failed INTEGER NOT NULL,
    json TEXT NOT NULL, annotations TEXT);
CREATE INDEX IF NOT EXISTS trajectories_by_iteration ON trajectories (phase, iteration);
CREATE TABLE IF NOT EXISTS steps (
    trajectory_id TEXT NOT NULL REFERENCES trajectories (trajectory_id) ON DELETE CASCADE,
    step_index INTEGER NOT NULL, action_text TEXT NOT NULL, observation TEXT NOT NULL, reward REAL NOT NULL,
    parse_error TEXT, label TEXT, PRIMARY KEY (trajectory_id, step_index));
CREATE TABLE IF NOT EXISTS experiences (
    experience_id TEXT PRIMARY KEY, iteration INTEGER, json TEXT NOT NULL, vector BLOB);
CREATE TABLE IF NOT EXISTS metrics (
    iteration INTEGER NOT NULL, name TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (iteration, name));
CREATE TABLE IF NOT EXISTS explorations (
    exploration_id TEXT PRIMARY KEY, iteration INTEGER, json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS evaluations (phase TEXT PRIMARY KEY, json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (iteration INTEGER PRIMARY KEY, path TEXT NOT NULL, created REAL NOT NULL);
"""


def _jsonable(obj):
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


class IterationStatus:
    STARTED = "started"
    ROLLED_OUT = "rolled_out"  # stage B committed: trajectories are in the store
    DONE = "done"  # stage D committed: metrics, checkpoint


@dataclass(frozen=True)
class CheckpointRow:
    iteration: int
    path: str
    created: float


class RunStore:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._held: list[IO] = []
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.executescript(SCHEMA)
        self._tasks: dict[str, Task] | None = None  # parsed once; kept in step with put_tasks
        if not has_annotations(self._conn):  # a store of schema 1: rows with whole prompts, no annotations column
            with self.transaction() as c:
                c.execute("ALTER TABLE trajectories ADD COLUMN annotations TEXT")
                self.put_meta(c, "schema_version", str(SCHEMA_VERSION))
        if self.get_meta("schema_version") is None:
            self.set_meta("schema_version", str(SCHEMA_VERSION))

    def close(self) -> None:
        self._conn.close()
        for held in self._held:
            held.close()
        self._held.clear()

    def hold_until_closed(self, resource: IO) -> None:
        """Close ``resource`` (a run folder's lock) when the store closes."""
        self._held.append(resource)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All writes inside commit together or not at all."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                self._tasks = None  # tasks put in the rolled-back transaction are not stored
                raise
            self._conn.execute("COMMIT")

    # -- meta ------------------------------------------------------------------------------------------------
    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as c:
            self.put_meta(c, key, value)

    @staticmethod
    def put_meta(c: sqlite3.Connection, key: str, value: str) -> None:
        """``set_meta`` inside an open transaction (with other writes that must land together)."""
        c.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def get_meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    # -- writes (pass the connection of an open transaction) ---------------------------------------------------
    def put_tasks(self, c: sqlite3.Connection, tasks: Sequence[Task], iteration: int | None) -> None:
        c.executemany(
            "INSERT OR IGNORE INTO tasks VALUES (?, ?, ?, ?)",
            [(t.task_id, t.source.value, iteration, t.model_dump_json()) for t in tasks],
        )
        if self._tasks is not None:  # the first stored version of a task id wins, as in the table
            for t in tasks:
                self._tasks.setdefault(t.task_id, t)

    @staticmethod
    def put_trajectories(c: sqlite3.Connection, trajectories: Sequence[Trajectory], iteration: int, phase: str) -> None:
        for t in trajectories:
            c.execute(
                "INSERT INTO trajectories VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                (
                    t.trajectory_id,
                    iteration,
                    phase,
                    t.task_id,
                    t.group_id,
                    t.outcome_reward,
                    int(t.flags.experience_guided),
                    int(t.flags.failed),
                    encode_trajectory(t),
                ),
            )
            labels = t.step_attributions or []
            c.executemany(
                "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        t.trajectory_id,
                        s.index,
                        s.action_text,
                        s.observation,
                        s.reward,
                        s.parse_error,
                        labels[i].value if i < len(labels) else None,
                    )
                    for i, s in enumerate(t.steps)
                ],
            )

    @staticmethod
    def update_trajectories(c: sqlite3.Connection, trajectories: Sequence[Trajectory]) -> None:
        """Store what later stages annotated (step labels, flags): the small annotations column and the step
        labels; the trajectory's body, written once after the rollout, is not rewritten."""
        for t in trajectories:
            c.execute(
                "UPDATE trajectories SET annotations = ? WHERE trajectory_id = ?",
                (encode_annotations(t), t.trajectory_id),
            )
            labels = t.step_attributions or []
            c.executemany(
                "UPDATE steps SET label = ? WHERE trajectory_id = ? AND step_index = ?",
                [
                    (labels[i].value if i < len(labels) else None, t.trajectory_id, s.index)
                    for i, s in enumerate(t.steps)
                ],
            )

    @staticmethod
    def set_iteration(c: sqlite3.Connection, iteration: int, status: str) -> None:
        now = time.time()
        c.execute(
            "INSERT INTO iterations (iteration, status, started) VALUES (?, ?, ?) "
            "ON CONFLICT (iteration) DO UPDATE SET status = excluded.status",
            (iteration, status, now),
        )
        if status == IterationStatus.DONE:
            c.execute("UPDATE iterations SET finished = ? WHERE iteration = ?", (now, iteration))

    @staticmethod
    def put_metrics(c: sqlite3.Connection, iteration: int, metrics: dict[str, float]) -> None:
        c.executemany(
            "INSERT OR REPLACE INTO metrics VALUES (?, ?, ?)", [(iteration, k, float(v)) for k, v in metrics.items()]
        )

    def put_checkpoint(self, c: sqlite3.Connection, iteration: int, path: str) -> None:
        """Record a checkpoint; a path inside the run folder is stored relative to it, so a moved or copied run
        resumes from its own files (``checkpoints`` resolves it against the store's folder)."""
        p = Path(path)
        try:
            stored = str(p.resolve().relative_to(self.path.parent.resolve()))
        except ValueError:  # outside the run folder: kept as given
            stored = str(p)
        c.execute("INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?)", (iteration, stored, time.time()))

    @staticmethod
    def put_experiences(c: sqlite3.Connection, experiences: Sequence[Experience], iteration: int, vectors=None) -> None:
        """Upsert experiences, with their float32 ``when_to_use`` embeddings (the pool's vector index) if given."""
        rows = []
        for i, e in enumerate(experiences):
            blob = vectors[i].astype("float32").tobytes() if vectors is not None else None
            rows.append((e.experience_id, iteration, e.model_dump_json(), blob))
        c.executemany("INSERT OR REPLACE INTO experiences VALUES (?, ?, ?, ?)", rows)

    @staticmethod
    def delete_experiences(c: sqlite3.Connection, ids: Sequence[str]) -> None:
        c.executemany("DELETE FROM experiences WHERE experience_id = ?", [(i,) for i in ids])

    @staticmethod
    def put_explorations(c: sqlite3.Connection, traces: Sequence, iteration: int | None) -> None:
        """Self-questioning exploration trajectories (dataclasses; stored as JSON)."""
        import dataclasses

        c.executemany(
            "INSERT OR REPLACE INTO explorations VALUES (?, ?, ?)",
            [(t.exploration_id, iteration, json.dumps(dataclasses.asdict(t), default=_jsonable)) for t in traces],
        )

    @staticmethod
    def put_evaluation(c: sqlite3.Connection, phase: str, summary: dict) -> None:
        c.execute("INSERT OR REPLACE INTO evaluations VALUES (?, ?)", (phase, json.dumps(summary)))

    @staticmethod
    def delete_iteration_trajectories(c: sqlite3.Connection, iteration: int, phase: str) -> None:
        c.execute("DELETE FROM trajectories WHERE iteration = ? AND phase = ?", (iteration, phase))

    def rollback_after(self, iteration: int) -> None:
        """Forget every iteration after ``iteration`` (their rollouts, metrics, checkpoints and the final evaluation),
        so a resume re-runs them; ``iteration`` < -1 also forgets the cold start. The experience pool keeps its newest
        state (it is stored as one current pool, not per iteration)."""
        with self.transaction() as c:
            c.execute("DELETE FROM iterations WHERE iteration > ?", (iteration,))
            c.execute("DELETE FROM trajectories WHERE iteration > ? AND phase != 'eval_before'", (iteration,))
            c.execute("DELETE FROM metrics WHERE iteration > ?", (iteration,))
            c.execute("DELETE FROM checkpoints WHERE iteration > ?", (iteration,))
            # self-questioning's tasks (first_iteration -1, built before training, their funnel marker in meta) stay:
            # a rollback to before training must not leave the "synthesis done" marker without its tasks
            c.execute("DELETE FROM tasks WHERE first_iteration > ?", (max(iteration, -1),))
            c.execute("DELETE FROM evaluations WHERE phase = 'after'")
            if iteration < -1:
                c.execute("DELETE FROM evaluations WHERE phase = 'cold_start'")
                c.execute("DELETE FROM meta WHERE key = 'cold_start'")

    # -- reads -------------------------------------------------------------------------------------------------
    def iteration_status(self, iteration: int) -> str | None:
        row = self._conn.execute("SELECT status FROM iterations WHERE iteration = ?", (iteration,)).fetchone()
        return row[0] if row else None

    def completed_iterations(self) -> list[int]:
        rows = self._conn.execute(
            "SELECT iteration FROM iterations WHERE status = ? ORDER BY iteration", (IterationStatus.DONE,)
        ).fetchall()
        return [r[0] for r in rows]

    def next_iteration(self) -> int:
        done = self.completed_iterations()
        return done[-1] + 1 if done else 0

    def task_index(self) -> dict[str, Task]:
        """Every stored task by id, parsed from the database once per store (do not mutate)."""
        if self._tasks is None:
            rows = self._conn.execute("SELECT json FROM tasks ORDER BY rowid")
            parsed = _parse_rows(rows, lambda r: Task.model_validate_json(r[0]), "task")
            self._tasks = {t.task_id: t for t in parsed}
        return self._tasks

    def tasks(self) -> list[Task]:
        return list(self.task_index().values())

    def trajectories(
        self, iteration: int | None = None, phase: str = "train", strict: bool = False
    ) -> list[Trajectory]:
        """The stored trajectories; damaged rows are skipped (with a warning), or with ``strict`` (a resumed
        iteration reusing its rollouts needs every one) raise DamagedRows."""
        if iteration is None:
            rows = self._conn.execute(
                "SELECT json, annotations FROM trajectories WHERE phase = ? ORDER BY rowid", (phase,)
            )
        else:
            rows = self._conn.execute(
                "SELECT json, annotations FROM trajectories WHERE phase = ? AND iteration = ? ORDER BY rowid",
                (phase, iteration),
            )
        return _parse_rows(rows, lambda r: decode_trajectory(r[0], r[1]), "trajectory", strict)

    def count(self, table: str) -> int:
        if table not in {
            "tasks",
            "trajectories",
            "steps",
            "experiences",
            "metrics",
            "checkpoints",
            "iterations",
            "explorations",
        }:
            raise ValueError(f"unknown table {table}")
        return self._conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]

    def metrics(self) -> dict[int, dict[str, float]]:
        out: dict[int, dict[str, float]] = {}
        for it, name, value in self._conn.execute("SELECT iteration, name, value FROM metrics ORDER BY iteration"):
            out.setdefault(it, {})[name] = value
        return out

    def evaluation(self, phase: str) -> dict | None:
        row = self._conn.execute("SELECT json FROM evaluations WHERE phase = ?", (phase,)).fetchone()
        found = _parse_rows([row] if row else [], lambda r: json.loads(r[0]), "evaluation")
        return found[0] if found and isinstance(found[0], dict) else None  # damaged: evaluated again

    def checkpoints(self) -> list[CheckpointRow]:
        """Every checkpoint, its path resolved against the run folder (the store's folder) when stored relative;
        an absolute path inside a folder named like this run's, from a store written before paths were relative,
        is read from this run's own copy when the original is gone."""
        rows = self._conn.execute("SELECT iteration, path, created FROM checkpoints ORDER BY iteration")
        return [CheckpointRow(i, self._own_path(p), t) for i, p, t in rows]

    def _own_path(self, stored: str) -> str:
        p = Path(stored)
        if not p.is_absolute():
            return str(self.path.parent / p)
        parts = p.parts
        if "checkpoints" in parts:  # an old absolute path: prefer this run folder's copy of the same checkpoint
            own = self.path.parent.joinpath(*parts[parts.index("checkpoints") :])
            if own.exists() or not p.exists():
                return str(own)
        return stored

    def latest_checkpoint(self) -> CheckpointRow | None:
        rows = self.checkpoints()
        return rows[-1] if rows else None

    def experience_vectors(self) -> dict[str, bytes]:
        return {i: v for i, v in self._conn.execute("SELECT experience_id, vector FROM experiences") if v is not None}

    def experiences(self) -> list[Experience]:
        rows = self._conn.execute("SELECT json FROM experiences ORDER BY rowid")
        return _parse_rows(rows, lambda r: Experience.model_validate_json(r[0]), "experience")


def has_annotations(con: sqlite3.Connection) -> bool:
    """Whether the store's trajectories table has the annotations column (schema 2)."""
    return any(r[1] == "annotations" for r in con.execute("PRAGMA table_info(trajectories)"))


def read_trajectory(con: sqlite3.Connection, trajectory_id: str) -> Trajectory | None:
    """One stored trajectory by id, from any connection (the dashboard's read-only one included)."""
    cols = "json, annotations" if has_annotations(con) else "json, NULL"
    row = con.execute(f"SELECT {cols} FROM trajectories WHERE trajectory_id = ?", (trajectory_id,)).fetchone()
    return None if row is None else decode_trajectory(row[0], row[1])
