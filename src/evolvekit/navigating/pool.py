"""The experience pool (AgentEvolver §4.1, Eq. 13-14) with EvolveR's lifecycle.

Experiences are ``when_to_use`` + ``content``; the vector index holds the L2-normalised embedding of
``when_to_use`` (a dense numpy matrix: exact top-k by one matrix-vector product). A new experience whose cosine
similarity to an existing one is ≥ θ_sim is offered to an equivalence check (an LLM, or any callable); if
equivalent it is *merged* (its source trajectories linked to the existing one) instead of added. Every experience
counts uses and successes; score s = (c_succ + 1)/(c_use + 2); ``prune`` drops those with s < θ_prune.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from evolvekit.types import Experience

EquivalenceCheck = Callable[[Experience, Experience], bool]


MAX_IMPORT_EXPERIENCES = 10_000  # one `experiences import` (each is embedded and merged)
MAX_IMPORT_BYTES = 64 * 2**20


@dataclass(frozen=True)
class AddResult:
    action: str  # "added" | "merged"
    experience_id: str
    similarity: float = 0.0


def should_prune(exp: Experience, theta_prune: float, min_uses: int = 0) -> bool:
    """EvolveR: prune when s = (c_succ + 1)/(c_use + 2) < θ_prune — once it has been used ``min_uses`` times."""
    return exp.use_count >= min_uses and exp.score < theta_prune


class ExperiencePool:
    def __init__(
        self,
        embed: Callable[[Sequence[str]], np.ndarray],
        theta_sim: float = 0.85,
        equivalent: EquivalenceCheck | None = None,
    ) -> None:
        self.embed = embed
        self.theta_sim = theta_sim
        self.equivalent = equivalent or (lambda new, old: True)
        self.items: list[Experience] = []
        self._buf = np.zeros((0, 0), dtype=np.float32)

    def __len__(self) -> int:
        return len(self.items)

    def _index_of(self, experience_id: str) -> int:
        for i, e in enumerate(self.items):
            if e.experience_id == experience_id:
                return i
        raise KeyError(experience_id)

    def get(self, experience_id: str) -> Experience:
        return self.items[self._index_of(experience_id)]

    def _append(self, exp: Experience, vec: np.ndarray) -> None:
        # capacity doubling: n appends cost O(n) copies in total, not O(n^2)
        vec = np.asarray(vec)  # stored as float32 by the buffer
        n = len(self.items)
        if self._buf.shape[0] <= n or self._buf.shape[1] != vec.shape[0]:
            grown = np.zeros((max(16, 2 * self._buf.shape[0]), vec.shape[0]), dtype=np.float32)
            if n:
                grown[:n] = self._buf[:n]
            self._buf = grown
        self._buf[n] = vec
        self.items.append(exp)

    @property
    def vectors(self) -> np.ndarray:
        return self._buf[: len(self.items)]

    @vectors.setter
    def vectors(self, value: np.ndarray) -> None:
        """A float32 copy; an empty array of any shape becomes the empty index."""
        self._buf = np.array(value, dtype=np.float32, copy=True) if value.size else np.zeros((0, 0), dtype=np.float32)

    def load_vectors(self, experiences: Sequence[Experience], vectors: np.ndarray) -> None:
        """Restore items with precomputed normalised vectors (no merging, no embedding)."""
        self.items = list(experiences)
        self.vectors = np.asarray(vectors)

    def add(self, exp: Experience, vector: np.ndarray | None = None) -> AddResult:
        """Add, or merge into the most similar existing experience when similarity ≥ θ_sim and equivalent."""
        vec = vector if vector is not None else self.embed([exp.when_to_use])[0]
        if self.items:
            sims = self.vectors @ vec
            j = int(np.argmax(sims))
            best = float(sims[j])
            if best >= self.theta_sim and self.equivalent(exp, self.items[j]):
                old = self.items[j]
                prov = old.provenance.model_copy(
                    update={
                        "trajectory_ids": old.provenance.trajectory_ids
                        + [t for t in exp.provenance.trajectory_ids if t not in old.provenance.trajectory_ids],
                        "task_ids": old.provenance.task_ids
                        + [t for t in exp.provenance.task_ids if t not in old.provenance.task_ids],
                    }
                )
                self.items[j] = old.model_copy(update={"provenance": prov})
                return AddResult("merged", old.experience_id, best)
            self._append(exp, vec)
            return AddResult("added", exp.experience_id, best)
        self._append(exp, vec)
        return AddResult("added", exp.experience_id)  # similarity 0.0: nothing to compare with

    def retrieve(self, query: str, k: int = 5) -> list[tuple[Experience, float]]:
        """Eq. 14: top-k experiences by cosine similarity of ``when_to_use`` to the query."""
        if not self.items or k <= 0:
            return []
        q = self.embed([query])[0]
        sims = self.vectors @ q
        k = min(k, len(self.items))
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top])]
        return [(self.items[i], float(sims[i])) for i in top]

    def record_use(self, experience_ids: Sequence[str], success: bool) -> None:
        for eid in experience_ids:
            try:
                i = self._index_of(eid)
            except KeyError:
                continue  # pruned meanwhile
            e = self.items[i]
            self.items[i] = e.model_copy(
                update={"use_count": e.use_count + 1, "success_count": e.success_count + int(success)}
            )

    def prune(self, theta_prune: float, min_uses: int = 0) -> list[str]:
        keep = [i for i, e in enumerate(self.items) if not should_prune(e, theta_prune, min_uses)]
        kept = set(keep)
        removed = [e.experience_id for i, e in enumerate(self.items) if i not in kept]
        self.vectors = self.vectors[keep]
        self.items = [self.items[i] for i in keep]
        return removed

    # -- sharing -----------------------------------------------------------------------------------------------------
    def export_jsonl(self, path: Path) -> int:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as fh:
            for e in self.items:
                fh.write(e.model_dump_json() + "\n")
        return len(self.items)

    def import_jsonl(self, path: Path) -> list[AddResult]:
        """Import a shared pool; imported experiences go through the same merge rule. The whole file is validated
        first: a malformed one is a ``ConfigError`` naming the line, and adds nothing."""
        from evolvekit.errors import ConfigError
        from evolvekit.safejson import read_jsonl

        if Path(path).is_file() and Path(path).stat().st_size > MAX_IMPORT_BYTES:
            raise ConfigError(f"{path}: over {MAX_IMPORT_BYTES // 2**20} MiB; an experience file holds at most that")
        found = read_jsonl(path, Experience, "an experience")
        if len(found) > MAX_IMPORT_EXPERIENCES:
            raise ConfigError(
                f"{path}: {len(found)} experiences, more than the {MAX_IMPORT_EXPERIENCES} one import takes"
            )
        return [self.add(e) for e in found]

    def load(self, experiences: Sequence[Experience]) -> None:
        """Restore a stored pool as is (no merging), re-embedding in one batch."""
        self.items = list(experiences)
        self.vectors = self.embed([e.when_to_use for e in self.items]) if self.items else np.zeros((0, 0))
