"""Experience retrieval: top-5 latency over pools of 1k / 10k / 100k experiences, and pool growth with and
without dedup (merge at θ_sim) and pruning.

    .venv/bin/python benchmarks/speed/retrieval.py

Latency is the index search (one matrix-vector product over L2-normalised 384-d vectors plus a partial sort) on
precomputed vectors, reported as p50/p95 over 200 queries; the query's embedding with the packaged MiniLM is
reported separately. Growth: a stream of experiences drawn around 200 "lessons" (each new one is a noisy copy
of a lesson), with uses whose success depends on the lesson's quality, added with θ_sim = 0.85 merging and
θ_prune = 0.3 pruning on / off.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def _normalise(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def latency(sizes, dim=384, queries=200, k=5, seed=0) -> dict:
    from evolvekit.navigating.pool import ExperiencePool
    from evolvekit.types import Experience

    rng = np.random.default_rng(seed)
    out = {}
    for n in sizes:
        vecs = _normalise(rng.standard_normal((n, dim)))
        qs = _normalise(rng.standard_normal((queries, dim)))
        table = {}
        pool = ExperiencePool(lambda texts: np.stack([table[t] for t in texts]))  # noqa: B023  (used in this iteration)
        pool.load_vectors([Experience(when_to_use=f"w{i}", content="c") for i in range(n)], vecs)
        times = []
        for i in range(queries):
            table["q"] = qs[i]
            t0 = time.perf_counter()
            pool.retrieve("q", k)
            times.append((time.perf_counter() - t0) * 1000)
        out[n] = {
            "p50_ms": round(float(np.percentile(times, 50)), 3),
            "p95_ms": round(float(np.percentile(times, 95)), 3),
        }
        print(
            f"top-{k} over {n:>7} experiences: p50 {out[n]['p50_ms']:.3f} ms, p95 {out[n]['p95_ms']:.3f} ms", flush=True
        )
    return out


def growth(steps=3000, lessons=200, dim=384, seed=0, lifecycle=True) -> list[int]:
    from evolvekit.navigating.pool import ExperiencePool
    from evolvekit.types import Experience

    rng = np.random.default_rng(seed)
    centers = _normalise(rng.standard_normal((lessons, dim)))
    quality = rng.uniform(0.05, 0.95, lessons)
    table: dict[str, np.ndarray] = {}
    pool = ExperiencePool(lambda texts: np.stack([table[t] for t in texts]), theta_sim=0.85 if lifecycle else 2.0)
    lesson_of: dict[str, int] = {}
    sizes = []
    for step in range(steps):
        j = int(rng.integers(lessons))
        v = _normalise((centers[j] + 0.01 * rng.standard_normal(dim))[None, :])[0]  # copies at cosine ~0.96
        key = f"e{step}"
        table[key] = v
        res = pool.add(Experience(when_to_use=key, content="c"), v)
        lesson_of.setdefault(res.experience_id, j)
        # one guided use of a retrieved experience per step
        hit = pool.retrieve(key, 1)[0][0]
        pool.record_use([hit.experience_id], bool(rng.random() < quality[lesson_of[hit.experience_id]]))
        if lifecycle and step % 100 == 99:
            pool.prune(0.3)
        if step % 250 == 249:
            sizes.append(len(pool))
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--growth-steps", type=int, default=3000)
    args = ap.parse_args()
    lat = latency([int(x) for x in args.sizes.split(",")])
    from evolvekit.config import EmbeddingConfig
    from evolvekit.llm.factory import build_embedder

    emb = build_embedder(EmbeddingConfig())
    emb.embed(["warm up"])
    t = []
    for i in range(20):
        t0 = time.perf_counter()
        emb.embed([f"find the file number {i} in the documents folder"])
        t.append((time.perf_counter() - t0) * 1000)
    q_ms = round(float(np.percentile(t, 50)), 2)
    print(f"query embedding (MiniLM, CPU): p50 {q_ms} ms")
    with_lc = growth(args.growth_steps, lifecycle=True)
    without = growth(args.growth_steps, lifecycle=False)
    print(f"pool size every 250 additions, dedup+pruning: {with_lc}")
    print(f"pool size every 250 additions, neither:       {without}")
    print(
        json.dumps(
            {
                "latency": lat,
                "query_embedding_p50_ms": q_ms,
                "growth_with_lifecycle": with_lc,
                "growth_without": without,
            }
        )
    )


if __name__ == "__main__":
    main()
