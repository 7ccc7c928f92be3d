"""fp32 master weights (train/master.py): small AdamW steps move bf16 weights as the rounded fp32 run does, where
in-place bf16 AdamW leaves most of them where they were; the trainer uses them for bf16 models, checkpoints them,
and gradient checkpointing leaves the update unchanged."""

import pytest
import torch

from evolvekit.config import TrainConfig
from evolvekit.llm.local import LocalLLM
from evolvekit.llm.tiny import make_tiny_model
from evolvekit.train.master import MasterWeights, needs_master
from evolvekit.train.trainer import GRPOTrainer
from evolvekit.types import TrainingSample


def _samples(n=4):
    out = []
    for i in range(n):
        L = 10 + 3 * i
        out.append(
            TrainingSample(
                trajectory_id=f"t{i}",
                group_id="g",
                token_ids=[(7 * i + j) % 500 + 1 for j in range(L)],
                loss_mask=[0] * 6 + [1] * (L - 6),
                token_advantages=[0.0] * 6 + [(1.0 if i % 2 else -1.0)] * (L - 6),
                experience_mask=[0] * L,
            )
        )
    return out


def _adamw_steps(param, grads, lr, master: MasterWeights | None = None):
    opt = torch.optim.AdamW(master.optim_params if master else [param], lr=lr, weight_decay=0.0)
    for g in grads:
        param.grad = g.to(param.dtype)
        if master is not None:
            master.to_master_grads()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if master is not None:
            master.to_model()


def test_small_steps_move_bf16_weights_as_the_rounded_fp32_run():
    gen = torch.Generator().manual_seed(0)
    start = (torch.randn(4096, generator=gen) * 0.02).to(torch.bfloat16)
    # gradients exactly representable in bf16, so all three runs see the same values
    grads = [torch.randn(4096, generator=gen).to(torch.bfloat16).float() for _ in range(200)]
    lr = 1e-6  # the paper's learning rate: one step is far below half a bf16 ulp of a 0.02 weight

    fp32 = torch.nn.Parameter(start.float().clone())
    _adamw_steps(fp32, grads, lr)
    with_master = torch.nn.Parameter(start.clone())
    master = MasterWeights([with_master])
    _adamw_steps(with_master, grads, lr, master)
    in_place = torch.nn.Parameter(start.clone())
    _adamw_steps(in_place, grads, lr)

    assert torch.equal(master.masters[0], fp32.detach())  # the fp32 copy follows the fp32 run exactly
    assert torch.equal(with_master.detach(), fp32.detach().to(torch.bfloat16))  # the model holds it rounded
    moved_fp32 = (fp32.detach().to(torch.bfloat16) != start).float().mean().item()
    moved_in_place = (in_place.detach() != start).float().mean().item()
    assert moved_fp32 > 0.1  # 200 steps of 1e-6 (a random walk) cross a bf16 step for many weights
    assert moved_in_place < moved_fp32 / 4, (moved_in_place, moved_fp32)  # in place, most updates round away


def test_master_state_round_trips_and_refuses_another_model():
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    q = torch.nn.Parameter(torch.ones(2))
    m = MasterWeights([p, q])
    assert m.masters[1] is None and m.optim_params[1] is q and needs_master([p, q]) and not needs_master([q])
    m.masters[0].data += 1e-3
    state = m.state_dict()
    other = MasterWeights([torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16)), q])
    other.load_state_dict(state)
    assert torch.equal(other.masters[0], m.masters[0])
    with pytest.raises(ValueError):
        MasterWeights([q, q]).load_state_dict(state)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_the_trainer_keeps_master_weights_for_a_bf16_model(tiny_path, tmp_path):
    llm = LocalLLM(str(tiny_path), device="cpu", dtype="bfloat16")
    assert next(llm.model.parameters()).dtype == torch.bfloat16
    tr = GRPOTrainer(llm, TrainConfig(learning_rate=1e-6, kl_beta=0.0, autocast="off"))
    assert tr.master is not None
    before = [p.detach().clone() for p in llm.model.parameters()]
    for _ in range(3):
        tr.update(_samples())
    # the fp32 copies moved by about 3 steps of 1e-6, and the bf16 weights are exactly their rounding
    moved = max((m - b.float()).abs().max().item() for m, b in zip(tr.master.masters, before) if m is not None)
    assert 1e-6 < moved < 1e-4
    for p, m in zip(llm.model.parameters(), tr.master.masters):
        assert torch.equal(p.detach(), m.detach().to(torch.bfloat16))
    path = tr.save(tmp_path / "ckpt")
    assert (path / "master.pt").is_file()
    again = GRPOTrainer(LocalLLM(str(path), device="cpu", dtype="bfloat16"), TrainConfig(kl_beta=0.0))
    assert again.load_optimizer(path)
    for a, b in zip(again.master.masters, tr.master.masters):
        assert torch.equal(a, b)  # a resumed run continues from the exact fp32 weights
    off = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu", dtype="bfloat16"), TrainConfig(master_weights="off"))
    assert off.master is None
    fp32 = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), TrainConfig())
    assert fp32.master is None  # nothing to keep for fp32 weights
    # train.sharding fsdp2 in one process shards nothing: the plain bf16 copy is trained, with masters (as config
    # show's resolution says, tests/cpu/test_resolve.py)
    one_rank = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu", dtype="bfloat16"), TrainConfig(sharding="fsdp2"))
    assert one_rank.master is not None


@pytest.mark.parametrize("shared_prefix", [True, False])
def test_gradient_checkpointing_gives_the_same_update(tiny_path, shared_prefix):
    weights = []
    for ckpt in (False, True):
        llm = LocalLLM(str(tiny_path), device="cpu")
        cfg = TrainConfig(
            learning_rate=1e-3, kl_beta=0.0, autocast="off", gradient_checkpointing=ckpt, shared_prefix=shared_prefix
        )
        GRPOTrainer(llm, cfg).update(_samples())
        assert llm.model.is_activation_checkpointing == ckpt
        weights.append([p.detach().clone() for p in llm.model.parameters()])
    for a, b in zip(*weights):
        assert torch.allclose(a, b, atol=1e-6)
