"""Shared-prefix KV reuse in the local sampler gives the same tokens and log-probs as a full prefill."""

import pytest

from evolvekit.llm.base import SamplingParams
from evolvekit.llm.local import LocalLLM, common_prefix_len
from evolvekit.llm.tiny import make_tiny_model


def test_common_prefix_len():
    assert common_prefix_len([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_len([[5], [6]]) == 0
    assert common_prefix_len([]) == 0


def test_prefix_cache_matches_full_prefill(tmp_path):
    llm = LocalLLM(str(make_tiny_model(tmp_path / "m")), device="cpu")
    shared = list(range(100, 160))
    prompts = [shared + [7, 8, 9], shared + [11], shared + [12, 13, 14, 15, 16]]
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    with_cache = llm.generate_ids(prompts, params)
    llm.prefix_cache_min_tokens = 10_000  # disable
    without = llm.generate_ids(prompts, params)
    for a, b in zip(with_cache, without):
        assert a[0].token_ids == b[0].token_ids
        assert a[0].logprobs == pytest.approx(b[0].logprobs, abs=1e-4)


def test_prefix_kv_is_reused_across_calls_and_invalidated_by_updates(tmp_path):
    import torch

    llm = LocalLLM(str(make_tiny_model(tmp_path / "m")), device="cpu")
    shared = list(range(200, 260))
    params = SamplingParams(temperature=0.0, max_new_tokens=5)
    first = llm.generate_ids([shared + [1], shared + [2, 3]], params)
    assert llm.prefix_cache_hits == 0
    second = llm.generate_ids([shared + [1], shared + [2, 3]], params)  # the next turn: same shared prefix
    assert llm.prefix_cache_hits == 1
    assert [c[0].token_ids for c in first] == [c[0].token_ids for c in second]
    with torch.no_grad():  # a weight update makes the cached KV stale
        for p in llm.model.parameters():
            p.add_(0.05)
    llm.reset_prefix_cache()
    llm.prefix_cache_min_tokens = 10_000
    fresh = llm.generate_ids([shared + [1], shared + [2, 3]], params)
    llm.prefix_cache_min_tokens = 32
    third = llm.generate_ids([shared + [1], shared + [2, 3]], params)
    assert llm.prefix_cache_hits == 1  # recomputed, not reused
    assert [c[0].token_ids for c in third] == [c[0].token_ids for c in fresh]
