"""The two CPU-capable engines behind the rollouts' token seam (``generate_ids``): the native DecodeBatch and
transformers' continuous batching (``llm/continuous.py``). Under the same seed each returns token ids whose
per-token log-probabilities agree with a plain forward pass of the model."""

import pytest
import torch

from evolvekit.llm.base import SamplingParams
from evolvekit.llm.continuous import ContinuousBatchingLLM, cut_completion, paged_cache_blocks
from evolvekit.llm.local import LocalLLM
from evolvekit.llm.tiny import make_tiny_model


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    path = make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    return LocalLLM(str(path), device="cpu", packed_weights=False)


def _plain_logprobs(model, prompt: list[int], tokens: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["native", "continuous_batching"])
def test_engine_logprobs_agree_with_a_plain_forward(local, engine):
    llm = local if engine == "native" else ContinuousBatchingLLM(local)
    prompts = [[1, 5, 9, 13, 17], [1, 7, 7], [1, 30, 31, 32, 33, 34, 35]]
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=11)
    outs = llm.generate_ids(prompts, params)
    assert [len(o) for o in outs] == [2, 2, 2]
    for prompt, comps in zip(prompts, outs):
        for c in comps:
            assert c.prompt_token_ids == prompt and 1 <= len(c.token_ids) <= 6
            assert len(c.logprobs) == len(c.token_ids)
            want = _plain_logprobs(local.model, prompt, c.token_ids)
            assert c.logprobs == pytest.approx(want, abs=2e-4)
    again = llm.generate_ids(prompts, params)  # the same seed, the same tokens
    assert [[c.token_ids for c in o] for o in again] == [[c.token_ids for c in o] for o in outs]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["native", "continuous_batching"])
def test_update_weights_reaches_generation_through_the_seam(tmp_path, engine):
    """``RolloutEngine.update_weights``: after new weights arrive, the engine samples from the new model (its
    log-probabilities agree with a plain forward of the new weights, not the old), and the prefix cache is reset."""
    from evolvekit.llm.base import RolloutEngine

    local = LocalLLM(str(make_tiny_model(tmp_path / "model")), device="cpu")
    llm = local if engine == "native" else ContinuousBatchingLLM(local)
    assert isinstance(llm, RolloutEngine)
    old = {k: v.clone() for k, v in local.model.state_dict().items()}
    new = {k: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v for k, v in old.items()}
    local.prefix_kv((1, 5, 9))
    llm.update_weights(new)
    assert local._kv_entry is None  # the cached prefix belonged to the old weights
    prompt = [1, 5, 9, 13, 17]
    [[c]] = llm.generate_ids([prompt], SamplingParams(n=1, temperature=1.0, max_new_tokens=5, seed=3))
    reference = make_tiny_model(tmp_path / "other")
    plain = LocalLLM(str(reference), device="cpu", packed_weights=False).model
    plain.load_state_dict(new)
    assert c.logprobs == pytest.approx(_plain_logprobs(plain, prompt, c.token_ids), abs=2e-4)
    plain.load_state_dict(old)
    assert c.logprobs != pytest.approx(_plain_logprobs(plain, prompt, c.token_ids), abs=2e-4)


def test_paged_cache_blocks_hold_every_row_in_whole_pages():
    # ceil((10 + 20) / 256) = 1 and ceil((300 + 20) / 256) = 2 pages, plus one spare
    assert paged_cache_blocks([10, 300], 20, 256) == 4
    assert paged_cache_blocks([236], 20, 256) == 2  # exactly one page
    assert paged_cache_blocks([237], 20, 256) == 3  # one token over
    assert paged_cache_blocks([], 20, 256) == 1


def test_continuous_batching_sizes_its_cache_from_the_batch(local, monkeypatch):
    """Left to itself transformers fills 90% of free memory with KV cache (on CPU: the machine's RAM); the engine
    passes the batch's own need instead, and generation still completes every row."""
    seen = []
    real = type(local.model).generate_batch

    def spy(model, rows, **kw):
        seen.append(kw["continuous_batching_config"])
        return real(model, rows, **kw)

    monkeypatch.setattr(type(local.model), "generate_batch", spy)
    prompts = [local.encode("hello there"), local.encode("a longer prompt than that one")]
    out = ContinuousBatchingLLM(local).generate_ids(prompts, SamplingParams(n=2, max_new_tokens=5, seed=0))
    [cfg] = seen
    assert cfg.num_blocks == paged_cache_blocks([len(p) for p in prompts for _ in range(2)], 5, cfg.page_size)
    assert cfg.num_blocks < 10 and cfg.return_logprobs
    assert [len(comps) for comps in out] == [2, 2] and all(c.token_ids for comps in out for c in comps)


def test_continuous_batching_cuts_at_stop_strings_and_eos(local):
    decode = local.decode
    ids = local.encode("hello</tool_call> more")
    toks, lps, text, reason = cut_completion(decode, ids, [0.0] * len(ids), ("</tool_call>",), {0})
    assert text == "hello" and reason == "stop" and decode(toks).endswith("</tool_call>") and len(lps) == len(toks)
    eos = local.tokenizer.eos_token_id
    toks, _, text, reason = cut_completion(decode, [ids[0], eos, ids[1]], [0.0] * 3, (), {eos})
    assert toks == [ids[0], eos] and reason == "stop" and text == decode([ids[0]])
    toks, _, _, reason = cut_completion(decode, ids, [0.0] * len(ids), ("nowhere",), {eos})
    assert toks == ids and reason == "length"


@pytest.mark.slow
def test_a_run_rolls_out_and_evaluates_through_continuous_batching(local, tmp_path, monkeypatch, config_problem):
    """`models.policy.engine: continuous_batching`: the loop's rollouts and held-out evaluation go through it."""
    from pathlib import Path

    from evolvekit.config import Config
    from evolvekit.llm import continuous
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    calls = []
    real = continuous.ContinuousBatchingLLM.generate_ids
    monkeypatch.setattr(
        continuous.ContinuousBatchingLLM, "generate_ids", lambda self, p, s: calls.append(len(p)) or real(self, p, s)
    )
    data = {
        "run": {"name": "cb", "out_dir": str(tmp_path), "seed": 2},
        "env": {"name": "coin", "plugins": ["coin_env"]},
        "rollout": {"max_steps": 1, "group_size": 2},
        "train": {"iterations": 1, "tasks_per_iteration": 2, "eval_tasks": 2, "eval_k": 1, "autocast": "off"},
        "models": {"policy": {"model": local.name, "max_new_tokens": 6, "engine": "continuous_batching"}},
    }
    cfg, run_dir, store = open_run(Config.model_validate(data), None)
    summary = build_loop(cfg, run_dir, store, show_progress=False).run()
    store.close()
    assert summary["iterations"] == 1 and summary["eval_after"]["tasks"] == 2
    assert sum(calls) >= 4 + 2 + 2  # the training rollouts and both evaluations
    ray = config_problem({"models": {"policy": {"engine": "continuous_batching"}}, "rollout": {"backend": "ray"}})
    assert "engine: continuous_batching serves the rollouts of rollout.backend: local" in (ray or "")


def test_publishing_through_continuous_batching_drops_the_policys_prefix_cache(local):
    """The trainer publishes each update to the rollout engine; with continuous batching the wrapped policy's own
    prefix cache (read by its other callers, synthesis say) belongs to the old weights and is dropped too."""
    from evolvekit.engine.base import Engine

    local.prefix_kv((1, 5, 9))
    assert local._kv_entry is not None
    Engine(ContinuousBatchingLLM(local)).reset_prefix_cache()
    assert local._kv_entry is None
