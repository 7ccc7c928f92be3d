import pytest

from evolvekit.llm.base import SamplingParams
from evolvekit.types import ChatMessage

pytestmark = pytest.mark.gpu


def test_local_backend_on_cuda():
    from evolvekit.llm.local import LocalLLM

    llm = LocalLLM(device="cuda")
    [[c]] = llm.chat(
        [[ChatMessage(role="user", content="What is 2+2?")]], SamplingParams(temperature=0, max_new_tokens=16)
    )
    assert c.token_ids and c.text


def test_a_seeded_cpu_stream_samples_logits_on_cuda_as_on_the_cpu():
    """The explorer's and synthesizer's decode batches and the batcher's rows seed CPU generators; with the model on a
    GPU the logits are on CUDA (the BFCL recipe's short run failed there: "Expected a 'cuda' device type for
    generator"). The draw comes from the CPU stream, so the token is the one the CPU would pick."""
    import torch

    from evolvekit.llm.sampling import sample_next

    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(1))
    for top_p in (1.0, 0.9):
        on_cpu = sample_next(logits, 0.8, top_p, torch.Generator(device="cpu").manual_seed(7))
        on_gpu = sample_next(logits.cuda(), 0.8, top_p, torch.Generator(device="cpu").manual_seed(7))
        assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), on_cpu)
