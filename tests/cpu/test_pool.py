"""navigating/pool.py, every rule against hand-computed values (issue 53: its mutation look). The embedder is a
lookup table of hand-made unit vectors, so every similarity below is known exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from evolvekit.errors import ConfigError
from evolvekit.navigating import pool as pool_module
from evolvekit.navigating.pool import AddResult, ExperiencePool, should_prune
from evolvekit.types import Experience, ExperienceProvenance


def _unit(cos: float) -> list[float]:
    return [cos, math.sqrt(max(0.0, 1 - cos**2))]


class Table:
    """Embeds by lookup and records every call (how many texts, in which batches)."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.calls: list[list[str]] = []

    def __call__(self, texts):
        self.calls.append(list(texts))
        return np.array([self.table[t] for t in texts], dtype=np.float64)


def _exp(when: str, traj: str = "t1", task: str = "k1", eid: str | None = None, **kw) -> Experience:
    prov = ExperienceProvenance(trajectory_ids=[traj], task_ids=[task])
    extra = {"experience_id": eid} if eid else {}
    return Experience(when_to_use=when, content=f"content of {when}", provenance=prov, **extra, **kw)


TABLE = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": _unit(0.6), "q": _unit(0.8), "a2": _unit(0.85), "a3": _unit(0.8499)}


def test_should_prune_is_strict_and_waits_for_exactly_min_uses():
    at = Experience(when_to_use="w", content="c", use_count=2, success_count=0)  # s = 1/4
    assert should_prune(at, 0.3) and not should_prune(at, 0.25)  # s < θ, strictly
    assert should_prune(at, 0.3, min_uses=2) and not should_prune(at, 0.3, min_uses=3)  # c_use ≥ min_uses
    fresh = Experience(when_to_use="w", content="c")  # s = 1/2
    assert not should_prune(fresh, 0.5) and should_prune(fresh, 0.51)
    assert should_prune(fresh, 0.51, min_uses=0) and not should_prune(fresh, 0.51, min_uses=1)


def test_defaults_are_the_papers():
    pool = ExperiencePool(Table(TABLE))
    assert pool.theta_sim == 0.85 and len(pool) == 0 and pool.vectors.shape[0] == 0
    assert pool.equivalent(_exp("a"), _exp("b")) is True  # no check given: similarity alone decides


def test_the_first_experience_is_added_with_similarity_zero():
    pool = ExperiencePool(Table(TABLE))
    e = _exp("a")
    assert pool.add(e) == AddResult("added", e.experience_id, 0.0)
    assert pool.items == [e] and pool.vectors.tolist() == [[1.0, 0.0]]


def test_merge_at_exactly_theta_into_the_most_similar_and_never_below():
    embed = Table(TABLE)
    pool = ExperiencePool(embed, theta_sim=0.85)
    pool.add(_exp("b", eid="B"))
    pool.add(_exp("a", eid="A", traj="t1", task="k1"))
    seen: list[tuple[str, str]] = []

    def check(new, old):
        seen.append((new.when_to_use, old.experience_id))
        return True

    pool.equivalent = check
    res = pool.add(_exp("a2", traj="t2", task="k2"))
    assert res.action == "merged" and res.experience_id == "A" and res.similarity == pytest.approx(0.85, abs=1e-6)
    assert seen == [("a2", "A")]  # asked with (new, old), about the most similar one, not the first
    below = pool.add(_exp("a3", eid="C"))
    assert below.action == "added" and below.experience_id == "C"
    assert below.similarity == pytest.approx(0.8499, abs=1e-6)  # the best similarity is reported on an add too
    assert seen == [("a2", "A")]  # below θ the check is not asked
    assert [e.experience_id for e in pool.items] == ["B", "A", "C"]


def test_a_merge_links_new_sources_in_order_without_duplicates_and_keeps_the_old_text():
    pool = ExperiencePool(Table(TABLE))
    old = Experience(
        experience_id="A",
        when_to_use="a",
        content="old content",
        provenance=ExperienceProvenance(kind="failure", trajectory_ids=["t1", "t2"], task_ids=["k1"], iteration=3),
        use_count=4,
        success_count=1,
    )
    pool.add(old)
    new = Experience(
        when_to_use="a2",
        content="new content",
        provenance=ExperienceProvenance(trajectory_ids=["t2", "t3", "t4"], task_ids=["k2", "k1", "k3"]),
    )
    assert pool.add(new).action == "merged" and len(pool) == 1
    merged = pool.get("A")
    assert merged.provenance.trajectory_ids == ["t1", "t2", "t3", "t4"]
    assert merged.provenance.task_ids == ["k1", "k2", "k3"]
    assert merged.provenance.kind == "failure" and merged.provenance.iteration == 3
    assert (merged.when_to_use, merged.content, merged.use_count, merged.success_count) == ("a", "old content", 4, 1)
    assert pool.vectors.tolist() == [[1.0, 0.0]]  # the old vector stays


def test_an_equivalence_check_that_says_no_adds_instead():
    pool = ExperiencePool(Table(TABLE), equivalent=lambda new, old: False)
    pool.add(_exp("a"))
    res = pool.add(_exp("a", eid="X"))
    assert res.action == "added" and res.experience_id == "X" and res.similarity == pytest.approx(1.0)
    assert len(pool) == 2


def test_a_given_vector_is_used_and_nothing_is_embedded():
    embed = Table(TABLE)
    pool = ExperiencePool(embed)
    pool.add(_exp("a"), vector=np.array([0.0, 1.0]))
    assert embed.calls == [] and pool.vectors.tolist() == [[0.0, 1.0]]
    assert pool.add(_exp("b")).action == "merged"  # b = (0, 1) equals the given vector, not a's embedding


def test_the_index_grows_by_doubling_and_keeps_every_row():
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(40, 3))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    pool = ExperiencePool(Table({}), theta_sim=2.0)  # never merges
    shapes = []
    for i, v in enumerate(vecs):
        pool.add(_exp(f"e{i}"), vector=v)
        shapes.append(pool._buf.shape[0])
    assert np.allclose(pool.vectors, vecs, atol=1e-6) and pool.vectors.dtype == np.float32
    assert sorted(set(shapes)) == [16, 32, 64]  # 16 rows first, then doubled when full


def test_a_new_dimension_restarts_the_index():
    pool = ExperiencePool(Table({}), theta_sim=2.0)
    pool.load_vectors([], np.zeros((0, 0)))
    pool.add(_exp("x"), vector=np.array([0.6, 0.8, 0.0]))
    assert pool.vectors.shape == (1, 3) and pool.vectors[0].tolist() == pytest.approx([0.6, 0.8, 0.0])


def test_retrieval_is_top_k_by_cosine_in_order():
    embed = Table(TABLE)
    pool = ExperiencePool(embed, theta_sim=2.0)
    for w in ("b", "a", "c"):
        pool.add(_exp(w))
    hits = pool.retrieve("q", k=2)  # q·a = 0.8, q·c = 0.48 + 0.48 = 0.96, q·b = 0.6
    assert [e.when_to_use for e, _ in hits] == ["c", "a"]
    assert [s for _, s in hits] == pytest.approx([0.96, 0.8], abs=1e-6)
    everything = pool.retrieve("q", k=10)  # k above the pool's size: all of it
    assert [e.when_to_use for e, _ in everything] == ["c", "a", "b"]
    assert pool.retrieve("q", k=1)[0][0].when_to_use == "c"
    assert pool.retrieve("q", k=0) == [] and pool.retrieve("q", k=-1) == []
    assert ExperiencePool(embed).retrieve("q") == []
    assert len(pool.retrieve("q")) == 3  # the default k (5) capped by the pool's size


def test_record_use_counts_uses_and_successes_and_skips_pruned_ids():
    pool = ExperiencePool(Table(TABLE), theta_sim=2.0)
    pool.add(_exp("a", eid="A"))
    pool.add(_exp("b", eid="B"))
    pool.record_use(["A", "gone", "B"], success=True)
    pool.record_use(["A"], success=False)
    assert (pool.get("A").use_count, pool.get("A").success_count) == (2, 1)
    assert (pool.get("B").use_count, pool.get("B").success_count) == (1, 1)
    with pytest.raises(KeyError, match="gone"):
        pool.get("gone")


def test_prune_removes_in_order_and_keeps_vectors_aligned():
    pool = ExperiencePool(Table(TABLE), theta_sim=2.0)
    for w, eid in (("a", "A"), ("b", "B"), ("c", "C")):
        pool.add(_exp(w, eid=eid))
    pool.record_use(["A", "C"], success=False)  # s = 1/3 each
    pool.record_use(["B"], success=True)  # s = 2/3
    assert pool.prune(0.4, min_uses=2) == []  # nobody used twice yet
    assert pool.prune(0.4) == ["A", "C"]
    assert [e.experience_id for e in pool.items] == ["B"] and pool.vectors.tolist() == [[0.0, 1.0]]
    assert pool.retrieve("q", k=1)[0][0].experience_id == "B"
    pool.record_use(["B"], success=False)
    pool.record_use(["B"], success=False)  # s = 2/4
    assert pool.prune(0.6) == ["B"] and len(pool) == 0 and pool.vectors.shape == (0, 0)
    assert pool.add(_exp("a", eid="D")).action == "added" and pool.vectors.tolist() == [[1.0, 0.0]]
    assert pool.prune(0.6) == ["D"]  # by default an experience never used is pruned too (min_uses = 0)


def test_load_reembeds_in_one_batch_and_load_vectors_copies():
    embed = Table(TABLE)
    pool = ExperiencePool(embed, theta_sim=0.5)
    items = [_exp("a", eid="A"), _exp("a2", eid="A2")]  # similar enough to merge, but a load never merges
    pool.load(items)
    assert embed.calls == [["a", "a2"]] and [e.experience_id for e in pool.items] == ["A", "A2"]
    assert pool.vectors.dtype == np.float32 and pool.vectors[1].tolist() == pytest.approx(_unit(0.85))
    pool.load([])
    assert len(pool) == 0 and pool.vectors.shape == (0, 0) and embed.calls == [["a", "a2"]]
    given = np.array([[1.0, 0.0], [0.0, 1.0]])
    pool.load_vectors(items, given)
    given[0, 0] = 9.0
    assert pool.vectors.tolist() == [[1.0, 0.0], [0.0, 1.0]] and pool.items == items


def test_export_then_import_goes_through_the_merge_rule(tmp_path):
    pool = ExperiencePool(Table(TABLE), theta_sim=2.0)
    for w in ("a", "b", "a2"):
        pool.add(_exp(w))
    path = tmp_path / "deep" / "er" / "pool.jsonl"  # missing folders are made
    assert pool.export_jsonl(path) == 3 and len(path.read_text().splitlines()) == 3
    merging = ExperiencePool(Table(TABLE), theta_sim=0.85)
    results = merging.import_jsonl(path)
    assert [r.action for r in results] == ["added", "added", "merged"] and len(merging) == 2
    assert merging.items[0].provenance.trajectory_ids == ["t1"]


def test_the_import_limits_are_the_documented_ones():
    """docs/training.md states one import's bounds; a changed constant fails here (hand_mutants.py)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    assert pool_module.MAX_IMPORT_EXPERIENCES == 10_000 and "at most **10,000 experiences**" in doc
    assert pool_module.MAX_IMPORT_BYTES == 64 * 2**20 and "**64 MiB**" in doc


def test_import_limits_and_a_bad_line_add_nothing(tmp_path, monkeypatch):
    path = tmp_path / "pool.jsonl"
    lines = [_exp(w).model_dump_json() for w in ("a", "b", "c")]
    path.write_text("\n".join(lines) + "\n")
    pool = ExperiencePool(Table(TABLE), theta_sim=2.0)
    monkeypatch.setattr(pool_module, "MAX_IMPORT_EXPERIENCES", 2)
    with pytest.raises(ConfigError, match="3 experiences, more than the 2"):
        pool.import_jsonl(path)
    monkeypatch.setattr(pool_module, "MAX_IMPORT_EXPERIENCES", 3)
    monkeypatch.setattr(pool_module, "MAX_IMPORT_BYTES", path.stat().st_size - 1)
    with pytest.raises(ConfigError, match="over"):
        pool.import_jsonl(path)
    monkeypatch.setattr(pool_module, "MAX_IMPORT_BYTES", path.stat().st_size)
    assert len(pool.import_jsonl(path)) == 3  # exactly at both limits: taken
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "\n" + json.dumps({"when_to_use": "x"}) + "\n")
    fresh = ExperiencePool(Table(TABLE))
    with pytest.raises(ConfigError, match="2"):
        fresh.import_jsonl(bad)
    assert len(fresh) == 0


def test_retrieval_returns_the_true_top_k_in_order_five_by_default_and_embeds_nothing_for_k_0():
    """Eq. 14 against a brute-force ranking (issue 53: the pool's look once mutmut's timeouts were run again)."""
    rng = np.random.default_rng(0)
    n = 300  # numpy selects small arrays by sorting them: a wrong partition index shows on larger ones
    cosines = [round(float(c), 4) for c in rng.permutation(np.linspace(-0.95, 0.95, n))]
    table = {f"e{i}": _unit(c) for i, c in enumerate(cosines)}
    table["q"] = [1.0, 0.0]
    embed = Table(table)
    pool = ExperiencePool(embed, theta_sim=1.1)  # nothing merges
    for i in range(n):
        pool.add(_exp(f"e{i}", eid=f"x{i}"))
    best_first = sorted(range(n), key=lambda i: -cosines[i])
    for k in (1, 2, 3, 7, n - 1, n, n + 1):
        got = pool.retrieve("q", k)
        assert [e.experience_id for e, _ in got] == [f"x{i}" for i in best_first[: min(k, n)]], k
        assert [s for _, s in got] == pytest.approx([cosines[i] for i in best_first[: min(k, n)]])
    assert len(pool.retrieve("q")) == 5  # k = 5, the paper's
    calls = len(embed.calls)
    assert pool.retrieve("q", 0) == [] and len(embed.calls) == calls  # nothing asked, nothing embedded


def test_an_empty_pool_holds_a_0_by_0_float32_matrix():
    pool = ExperiencePool(Table(TABLE))
    assert pool.vectors.shape == (0, 0) and pool.vectors.dtype == np.float32
    pool.load([])
    assert pool.vectors.shape == (0, 0) and pool.vectors.dtype == np.float32


def test_an_oversized_or_malformed_import_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(pool_module, "MAX_IMPORT_BYTES", 2**20)
    big = tmp_path / "big.jsonl"
    big.write_text("x" * (2**20 + 1))
    pool = ExperiencePool(Table(TABLE))
    with pytest.raises(ConfigError, match=r"big\.jsonl: over 1 MiB; an experience file holds at most that$"):
        pool.import_jsonl(big)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"when_to_use": 3}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:1: not an experience: "):
        pool.import_jsonl(bad)
    assert len(pool) == 0
