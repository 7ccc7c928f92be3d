"""The vLLM rollout engine (``models.policy.engine: vllm``) on a GPU where vLLM is installed; skipped elsewhere.

Its sampled tokens' log-probabilities equal a plain forward of the policy, and after the trainer's weights are pushed
(``update_weights``) they equal a plain forward of the new weights."""

import pytest
import torch

from evolvekit.llm.base import SamplingParams
from evolvekit.llm.tiny import make_tiny_model

pytestmark = pytest.mark.gpu
vllm = pytest.importorskip("vllm")


def _plain(model, prompt, tokens):
    ids = torch.tensor([prompt + tokens], device="cuda")
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0].float(), -1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


def test_vllm_engine_samples_the_policy_and_follows_its_updates(tmp_path):
    from evolvekit.llm.local import LocalLLM
    from evolvekit.llm.vllm_engine import VLLMEngine

    local = LocalLLM(str(make_tiny_model(tmp_path / "model")), device="cuda", dtype="float32")
    engine = VLLMEngine(local, gpu_memory_utilization=0.2)
    prompts = [[1, 5, 9, 13, 17], [1, 7, 7]]
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=5)
    for prompt, comps in zip(prompts, engine.generate_ids(prompts, params)):
        assert len(comps) == 2
        for c in comps:
            assert c.token_ids and c.logprobs == pytest.approx(_plain(local.model, prompt, c.token_ids), abs=1e-3)
    with torch.no_grad():  # a training step's worth of change, pushed as the trainer does (Policy.publish)
        for p in local.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    engine.update_weights(local.model.state_dict())
    [[c]] = engine.generate_ids([prompts[0]], SamplingParams(n=1, temperature=1.0, max_new_tokens=6, seed=6))
    assert c.logprobs == pytest.approx(_plain(local.model, prompts[0], c.token_ids), abs=1e-3)
