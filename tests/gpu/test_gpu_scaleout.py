"""The scale-out pieces on a CUDA GPU (skipped without one): bf16 master weights, both rollout engines' parity
with a plain forward, and the data-parallel update on NCCL with two GPUs."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evolvekit.config import TrainConfig
from evolvekit.llm.base import SamplingParams
from evolvekit.llm.tiny import make_tiny_model
from evolvekit.train.master import MasterWeights
from evolvekit.types import TrainingSample

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_bf16_small_steps_on_cuda_follow_the_fp32_run():
    gen = torch.Generator().manual_seed(0)
    start = (torch.randn(1 << 16, generator=gen) * 0.02).to(torch.bfloat16).cuda()
    grads = [torch.randn(1 << 16, generator=gen).to(torch.bfloat16).float().cuda() for _ in range(100)]
    fp32 = torch.nn.Parameter(start.float().clone())
    bf16 = torch.nn.Parameter(start.clone())
    master = MasterWeights([bf16])
    for p, params in ((fp32, [fp32]), (bf16, master.optim_params)):
        opt = torch.optim.AdamW(params, lr=1e-6, weight_decay=0.0)
        for g in grads:
            p.grad = g.to(p.dtype)
            if p is bf16:
                master.to_master_grads()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if p is bf16:
                master.to_model()
    torch.testing.assert_close(master.masters[0], fp32.detach(), rtol=1e-6, atol=1e-9)
    assert (bf16.detach() != start).float().mean().item() > 0.05  # bf16 weights moved
    assert torch.equal(bf16.detach(), master.masters[0].to(torch.bfloat16))


def test_bf16_trainer_on_cuda_keeps_master_weights(tiny):
    from evolvekit.llm.local import LocalLLM
    from evolvekit.train.trainer import GRPOTrainer

    llm = LocalLLM(str(tiny), device="cuda", dtype="bfloat16")
    before = {n: p.detach().clone() for n, p in llm.model.named_parameters()}
    tr = GRPOTrainer(llm, TrainConfig(learning_rate=1e-4, kl_beta=0.0, micro_batch_size=2))
    assert tr.master is not None
    samples = [
        TrainingSample(
            trajectory_id=f"t{i}", group_id="g", token_ids=[(7 * i + j) % 500 + 1 for j in range(12 + i)],
            loss_mask=[0] * 6 + [1] * (6 + i), token_advantages=[0.0] * 6 + [(-1.0) ** i] * (6 + i),
            experience_mask=[0] * (12 + i),
        )
        for i in range(4)
    ]  # fmt: skip
    stats = tr.update(samples)
    assert stats.optimizer_steps == 1 and stats.grad_norm > 0
    moved = sum(not torch.equal(before[n], p.detach()) for n, p in llm.model.named_parameters())
    assert moved > len(before) // 2


@pytest.mark.parametrize("engine", ["native", "continuous_batching"])
def test_engines_on_cuda_agree_with_a_plain_forward(tiny, engine):
    from evolvekit.llm.continuous import ContinuousBatchingLLM
    from evolvekit.llm.local import LocalLLM

    local = LocalLLM(str(tiny), device="cuda", dtype="float32")
    llm = local if engine == "native" else ContinuousBatchingLLM(local)
    prompts = [[1, 5, 9, 13, 17], [1, 7, 7]]
    outs = llm.generate_ids(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=5))
    for prompt, comps in zip(prompts, outs):
        for c in comps:
            ids = torch.tensor([prompt + c.token_ids], device="cuda")
            with torch.no_grad():
                lp = torch.log_softmax(local.model(ids).logits[0].float(), -1)
            want = [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(c.token_ids)]
            assert len(c.token_ids) >= 1 and c.logprobs == pytest.approx(want, abs=1e-3)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("sharding, shared_prefix", [("replicate", "on"), ("fsdp2", "off")])
def test_two_nccl_ranks_update_as_one(tiny, tmp_path, sharding, shared_prefix):
    worker = Path(__file__).resolve().parents[1] / "cpu" / "ddp_update_worker.py"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    for args in (
        [sys.executable, str(worker), str(tiny), str(tmp_path / "one"), shared_prefix],
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
         str(worker), str(tiny), str(tmp_path / "two"), shared_prefix, sharding],
    ):  # fmt: skip
        env = {**os.environ, "DDP_WORKER_DEVICE": "cuda"}
        done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
    single = torch.load(tmp_path / "one" / "rank0.pt")
    for r in (0, 1):
        rank = torch.load(tmp_path / "two" / f"rank{r}.pt")
        for name, g in single["grads"].items():
            torch.testing.assert_close(rank["grads"][name], g, rtol=1e-4, atol=1e-5 * float(g.abs().max()))
        for name, w in single["weights"].items():
            torch.testing.assert_close(rank["weights"][name], w, rtol=0, atol=5e-5)
            if r == 0:  # rank 0's policy, which its rollouts use, has the new weights (FSDP2: gathered into it)
                torch.testing.assert_close(rank["policy"][name], w, rtol=0, atol=5e-5)
