"""The GRPO trainer on a tiny random model: parameters move, micro-batching is exact, checkpoints reload."""

import copy
import json
import time
import zlib
from collections import Counter

import pytest
import torch
from episode_doubles import RecordingEngine

from evolvekit.config import TrainConfig
from evolvekit.llm.base import SamplingParams
from evolvekit.llm.local import LocalLLM
from evolvekit.llm.tiny import make_tiny_model
from evolvekit.train.trainer import GRPOTrainer, UpdateStats, sequence_logprobs
from evolvekit.types import TrainingSample


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _samples(n=4):
    out = []
    for i in range(n):
        L = 10 + 3 * i
        mask = [0] * 6 + [1] * (L - 6)
        adv = [0.0] * 6 + [(1.0 if i % 2 else -1.0)] * (L - 6)
        out.append(
            TrainingSample(
                trajectory_id=f"t{i}",
                group_id="g",
                token_ids=[(7 * i + j) % 500 + 1 for j in range(L)],
                loss_mask=mask,
                token_advantages=adv,
                experience_mask=[0] * L,
                experience_guided=bool(i % 2),
            )
        )
    return out


def _grads(path, micro):
    llm = LocalLLM(str(path), device="cpu")
    tr = GRPOTrainer(llm, TrainConfig(micro_batch_size=micro, kl_beta=0.0, autocast="off", learning_rate=0.0))
    tr.update(_samples())
    return {n: p.grad.clone() for n, p in llm.model.named_parameters() if p.grad is not None}


def test_update_changes_parameters_and_reports(tiny_path, tmp_path):
    llm = LocalLLM(str(tiny_path), device="cpu")
    ref = copy.deepcopy(llm.model)
    before = {n: p.detach().clone() for n, p in llm.model.named_parameters()}
    tr = GRPOTrainer(
        llm,
        TrainConfig(learning_rate=1e-3, micro_batch_size=2, autocast="off"),
        eps_high_boost=0.6,
        reference_model=ref,
    )
    st = tr.update(_samples())
    assert st.optimizer_steps == 1 and st.sequences == 4
    assert st.policy_tokens == sum(sum(s.loss_mask[1:]) for s in _samples())
    assert st.ratio == pytest.approx(1.0, abs=1e-4)  # on-policy: old log-probs are the current ones
    changed = sum(not torch.equal(before[n], p.detach()) for n, p in llm.model.named_parameters())
    assert changed > 0
    # checkpoint reloads with identical weights
    path = tr.save(tmp_path / "ckpt")
    again = LocalLLM(str(path), device="cpu")
    for (n, p), (_, q) in zip(llm.model.named_parameters(), again.model.named_parameters()):
        assert torch.equal(p.detach(), q.detach()), n
    assert tr.load_optimizer(path)


def test_micro_batching_gives_the_same_gradient(tiny_path):
    g1, g4 = _grads(tiny_path, 1), _grads(tiny_path, 4)
    assert g1.keys() == g4.keys() and g1
    for n in g1:
        assert torch.allclose(g1[n], g4[n], atol=1e-6, rtol=1e-4), n


def test_zero_advantages_leave_parameters_unchanged(tiny_path):
    llm = LocalLLM(str(tiny_path), device="cpu")
    before = {n: p.detach().clone() for n, p in llm.model.named_parameters()}
    samples = [s.model_copy(update={"token_advantages": [0.0] * len(s.token_ids)}) for s in _samples()]
    GRPOTrainer(llm, TrainConfig(learning_rate=1e-2, kl_beta=0.0, autocast="off")).update(samples)
    assert all(torch.equal(before[n], p.detach()) for n, p in llm.model.named_parameters())


def test_lora_trains_adapters_only_and_reloads(tiny_path, tmp_path):
    llm = LocalLLM(str(tiny_path), device="cpu")
    tr = GRPOTrainer(llm, TrainConfig(lora=True, lora_rank=4, learning_rate=1e-2, autocast="off"))
    trainable = [n for n, p in llm.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora" in n for n in trainable)
    st = tr.update(_samples())
    assert st.optimizer_steps == 1
    # the sampler (ragged forward, packed base weights) runs the adapted model: its greedy token is the argmax
    [[c]] = llm.generate_ids([[1, 2, 3, 4]], SamplingParams(temperature=0.0, max_new_tokens=1))
    with torch.no_grad():
        assert c.token_ids[0] == int(llm.model(input_ids=torch.tensor([[1, 2, 3, 4]])).logits[0, -1].argmax())
    path = tr.save(tmp_path / "lora")
    assert (path / "adapter_config.json").is_file()
    again = LocalLLM(str(path), device="cpu")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(llm.model(input_ids=ids).logits, again.model(input_ids=ids).logits, atol=1e-5)


def test_logits_to_keep_matches_the_full_projection(tiny_path):
    from evolvekit.train.trainer import sequence_logprobs

    llm = LocalLLM(str(tiny_path), device="cpu")
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17, 18]])
    attn = torch.ones_like(ids)
    with torch.no_grad():
        full, _ = sequence_logprobs(llm.model, ids, attn, None, start=1)
        part, _ = sequence_logprobs(llm.model, ids, attn, None, start=4)
    assert torch.allclose(full[:, 4:], part[:, 4:], atol=1e-5)
    assert torch.all(part[:, :4] == 0)


def test_several_optimizer_steps_per_batch(tiny_path):
    llm = LocalLLM(str(tiny_path), device="cpu")
    tr = GRPOTrainer(
        llm,
        TrainConfig(
            mini_batch_size=2, micro_batch_size=1, ppo_epochs=2, learning_rate=1e-3, kl_beta=0.0, autocast="off"
        ),
    )
    st = tr.update(_samples())
    assert st.optimizer_steps == 4  # 2 mini-batches x 2 epochs
    assert st.ratio != pytest.approx(1.0, abs=1e-9)  # later steps are off-policy against the recorded old log-probs


def _guided_pair(adv_sign=1.0, completion=40):
    """A guided sample as the trainer gets it after §4.3 stripping (6 prompt tokens, 8 experience tokens that were
    in context at generation time, then the completion), and a vanilla sample of the same task."""
    prompt = [11, 12, 13, 14, 15, 16]
    experience = [301, 302, 303, 304, 305, 306, 307, 308]
    comp = [(37 * j) % 400 + 20 for j in range(completion)]
    ids = prompt + comp
    n = len(ids)
    mask = [0] * len(prompt) + [1] * completion
    adv = [0.0] * len(prompt) + [adv_sign] * completion
    guided = TrainingSample(
        trajectory_id="g",
        group_id="grp",
        token_ids=ids,
        loss_mask=mask,
        token_advantages=adv,
        experience_mask=[0] * n,
        experience_guided=True,
        behaviour_token_ids=prompt + experience + comp,
        behaviour_positions=list(range(len(prompt))) + [len(prompt) + len(experience) + j for j in range(completion)],
    )
    vanilla = TrainingSample(
        trajectory_id="v",
        group_id="grp",
        token_ids=ids,
        loss_mask=mask,
        token_advantages=[-a for a in adv],
        experience_mask=[0] * n,
    )
    return [guided, vanilla]


def _sharp(path):
    """The tiny random model with sharper logits, so that context (the experience) moves token probabilities as
    much as it does in a trained model (a random init at std 0.02 is nearly uniform whatever the context)."""
    llm = LocalLLM(str(path), device="cpu")
    with torch.no_grad():
        for name, p in llm.model.named_parameters():
            if "embed" in name or "lm_head" in name or "o_proj" in name or "down_proj" in name:
                p.mul_(12.0)
    return llm


def test_guided_sample_ratio_compares_with_the_behaviour_policy(tiny_path):
    """Eq. 17 with stripping: the old log-probs of a guided sample come from the sequence *with* its experience,
    so its ratio is not 1 even in a single on-policy step; a vanilla sample's ratio stays exactly 1."""
    llm = _sharp(tiny_path)
    tr = GRPOTrainer(llm, TrainConfig(kl_beta=0.0, autocast="off", learning_rate=0.0), eps_high_boost=0.6)
    st = tr.update(_guided_pair())
    assert st.guided_tokens == 40  # the guided sample's loss tokens (a vanilla sample's are not counted)
    assert st.guided_ratio_dev > 1e-3
    assert st.vanilla_ratio_dev < 1e-6 and st.vanilla_clip_frac == 0.0
    assert st.guided_clip_frac > 0.0  # a context change this large moves some ratios past the clip


def _grads_with_boost(path, boost):
    llm = _sharp(path)
    tr = GRPOTrainer(
        llm, TrainConfig(kl_beta=0.0, autocast="off", learning_rate=0.0, eps_high=0.28), eps_high_boost=boost
    )
    st = tr.update(_guided_pair(adv_sign=1.0))
    return {n: p.grad.clone() for n, p in llm.model.named_parameters() if p.grad is not None}, st


def test_selective_boost_changes_the_guided_gradient(tiny_path):
    with_boost, st_on = _grads_with_boost(tiny_path, 0.6)
    without, st_off = _grads_with_boost(tiny_path, 0.28)  # ε̂_high = ε_high: the boost switched off
    assert st_on.boost_changed_share > 0.0 and st_off.boost_changed_share == 0.0
    assert any(not torch.allclose(with_boost[k], without[k]) for k in with_boost)


def test_build_samples_keeps_the_generated_sequence_of_a_stripped_trajectory():
    from evolvekit.train.samples import build_samples
    from evolvekit.types import SpanKind, Step, TokenSpan, Trajectory, TrajectoryFlags

    step = Step(
        index=0,
        action_text="a",
        prompt_token_ids=[1, 2, 9, 9, 9, 3],
        completion_token_ids=[4, 5],
        completion_logprobs=[-0.5, -0.25],
        spans=[TokenSpan(start=2, end=5, kind=SpanKind.EXPERIENCE)],
    )
    traj = Trajectory(
        task_id="t", group_id="g", steps=[step], outcome_reward=1.0, flags=TrajectoryFlags(experience_guided=True)
    )
    (stripped,), _ = build_samples([traj], [{0: 1.0}], strip_experience=True)
    assert stripped.token_ids == [1, 2, 3, 4, 5]
    assert stripped.behaviour_token_ids == [1, 2, 9, 9, 9, 3, 4, 5]
    assert stripped.behaviour_positions == [0, 1, 5, 6, 7]
    assert stripped.rollout_logprobs == [0.0, 0.0, 0.0, -0.5, -0.25]
    (kept,), _ = build_samples([traj], [{0: 1.0}], strip_experience=False)
    assert kept.behaviour_token_ids is None and kept.experience_mask == [0, 0, 1, 1, 1, 0, 0, 0]


def test_group_scales_by_hand():
    from evolvekit.train.trainer import group_scales

    def s(tokens, group):
        n = tokens + 1
        return TrainingSample(
            trajectory_id="t",
            group_id="g",
            token_ids=list(range(1, n + 1)),
            loss_mask=[0] + [1] * tokens,
            token_advantages=[0.0] * n,
            experience_mask=[0] * n,
            loss_group=group,
        )

    batch = [s(2, "extractor"), s(6, "solver"), s(2, "solver")]
    # 10 loss tokens in all (the first token of each sample never carries loss)
    assert group_scales(batch, 10.0) == [10 / 2, 10 / 8, 10 / 8]
    assert group_scales([s(3, ""), s(5, "")], 8.0) == [1.0, 1.0]


@pytest.mark.slow
def test_evolving_rl_joint_loss_is_lambda_weighted_sum_of_separate_means(tiny_path):
    """Eq. 6: L = λ_e·L_e + λ_s·L_s with each L its own token mean — so the joint gradient equals λ_e·∇(mean over
    the extractor samples) + λ_s·∇(mean over the solver samples), whatever their token counts."""
    base = _samples(4)
    ext = [x.model_copy(update={"loss_group": "extractor", "loss_weight": 0.2}) for x in base[:1]]
    sol = [x.model_copy(update={"loss_group": "solver", "loss_weight": 1.0}) for x in base[1:]]

    def grads(samples, micro=2):
        llm = LocalLLM(str(tiny_path), device="cpu")
        tr = GRPOTrainer(
            llm, TrainConfig(micro_batch_size=micro, kl_beta=0.0, autocast="off", learning_rate=0.0, max_grad_norm=1e9)
        )  # compare raw gradients, unclipped
        tr.update(samples)
        return {n: p.grad.clone() for n, p in llm.model.named_parameters() if p.grad is not None}

    joint = grads(ext + sol, micro=1)
    alone_e = grads([x.model_copy(update={"loss_group": "", "loss_weight": 1.0}) for x in ext])
    alone_s = grads([x.model_copy(update={"loss_group": "", "loss_weight": 1.0}) for x in sol])
    for k in joint:
        assert torch.allclose(joint[k], 0.2 * alone_e[k] + 1.0 * alone_s[k], atol=1e-6, rtol=1e-4), k
    # one token mean over all four (main before the fix) would weight the extractor by its token share instead
    flat = grads([x.model_copy(update={"loss_group": ""}) for x in ext + sol], micro=1)
    assert any(not torch.allclose(flat[k], joint[k], atol=1e-6) for k in joint)


def test_evolving_rl_uses_its_papers_clip_and_kl_unless_set():
    from evolvekit.config import load_config

    on = load_config(None, ["evolving_rl.enabled=true"])
    assert (on.train.eps_low, on.train.eps_high, on.train.kl_beta) == (0.1, 0.15, 0.01)
    mine = load_config(None, ["evolving_rl.enabled=true", "train.eps_high=0.28"])
    assert mine.train.eps_high == 0.28 and mine.train.eps_low == 0.1
    off = load_config(None, [])
    assert (off.train.eps_low, off.train.eps_high, off.train.kl_beta) == (0.28, 0.28, 0.001)


def _loss_with(path, **train):
    llm = _sharp(path)
    tr = GRPOTrainer(llm, TrainConfig(kl_beta=0.0, autocast="off", learning_rate=0.0, **train), eps_high_boost=0.6)
    return tr.update(_guided_pair(adv_sign=-1.0)).loss


def test_dual_clip_reaches_the_update_through_the_config(tiny_path):
    """train.dual_clip_c is wired into the trainer's loss: on a guided pair with a negative advantage (ratios far
    from 1, as stripping makes them), a tight dual clip lowers the loss."""
    plain = _loss_with(tiny_path)
    bounded = _loss_with(tiny_path, dual_clip_c=1.01)
    assert bounded < plain - 1e-6, (plain, bounded)


def test_mini_batches_are_reshuffled_every_epoch_and_cover_every_sample():
    """Issue 53 (5): mini-batches were the length-sorted samples in fixed runs, never shuffled across PPO epochs."""
    from evolvekit.train.trainer import mini_batches, shuffle_seed

    assert mini_batches(7, 3, None) == [[0, 1, 2], [3, 4, 5], [6]]
    assert mini_batches(4, 0, None) == [[0], [1], [2], [3]]
    assert mini_batches(4, 8, 5) == [[0, 1, 2, 3]]  # one mini-batch: nothing to shuffle
    parts = [mini_batches(12, 4, seed) for seed in (1, 2)]
    for part in parts:
        assert sorted(i for mini in part for i in mini) == list(range(12)) and all(m == sorted(m) for m in part)
    assert parts[0] != parts[1] and parts[0] != mini_batches(12, 4, None)
    assert mini_batches(12, 4, 1) == parts[0]  # seeded
    s = _samples()
    assert shuffle_seed(s, 0) == shuffle_seed(_samples(), 0) != shuffle_seed(s, 1)  # from the samples, per epoch
    shape = [[len(x.token_ids), x.token_ids[-1]] for x in s]  # by hand: the samples' lengths and last tokens
    assert shuffle_seed(s, 3) == zlib.crc32(json.dumps(shape).encode()) * 1009 + 3 != shuffle_seed(s[:3], 3)


@pytest.mark.parametrize("shuffle", [True, False])
def test_the_trainer_shuffles_mini_batches_when_asked_and_uses_adamw_betas(tiny_path, monkeypatch, shuffle):
    from evolvekit.train import trainer as trainer_mod

    seen = []
    real = trainer_mod.mini_batches

    def spy(n, size, seed):
        seen.append(seed)
        return real(n, size, seed)

    monkeypatch.setattr(trainer_mod, "mini_batches", spy)
    llm = LocalLLM(str(tiny_path), device="cpu")
    cfg = TrainConfig(
        mini_batch_size=2, ppo_epochs=2, shuffle_mini_batches=shuffle, kl_beta=0.0, autocast="off", adam_beta2=0.98
    )
    tr = GRPOTrainer(llm, cfg)
    st = tr.update(_samples())
    assert st.optimizer_steps == 4 and len(seen) == 2
    assert (None not in seen and seen[0] != seen[1]) if shuffle else seen == [None, None]
    assert tr.optimizer.param_groups[0]["betas"] == (0.9, 0.98)


def test_evolving_rl_sets_its_adamw_unless_set():
    from evolvekit.config import load_config

    on = load_config(None, ["evolving_rl.enabled=true"]).train
    assert (on.weight_decay, on.adam_beta1, on.adam_beta2) == (0.1, 0.9, 0.98)
    off = load_config(None, []).train
    assert (off.weight_decay, off.adam_beta2) == (0.0, 0.999)
    assert load_config(None, ["evolving_rl.enabled=true", "train.weight_decay=0.0"]).train.weight_decay == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_export_is_a_plain_transformers_folder_with_the_policys_logprobs(tiny_path, tmp_path, lora):
    """Issue 54 (8): `evolvekit export` writes a folder that plain transformers loads (no peft, LoRA merged) and whose
    log-probs match the run's policy."""
    import subprocess
    import sys

    from transformers import AutoModelForCausalLM

    llm = LocalLLM(str(tiny_path), device="cpu")
    tr = GRPOTrainer(llm, TrainConfig(lora=lora, lora_rank=4, learning_rate=1e-2, autocast="off"))
    tr.update(_samples())
    ckpt = tr.save(tmp_path / "ckpt")
    out = tmp_path / "exported"
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "export", str(ckpt), "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-1500:]
    assert (out / "config.json").is_file() and not (out / "adapter_config.json").exists()
    plain = AutoModelForCausalLM.from_pretrained(str(out))
    policy = LocalLLM(str(ckpt), device="cpu", packed_weights=False).model
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        a = torch.log_softmax(plain(input_ids=ids).logits.float(), -1)
        b = torch.log_softmax(policy(input_ids=ids).logits.float(), -1)
    assert torch.allclose(a, b, atol=1e-4)
    again = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "export", str(ckpt), "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 2 and "exists" in again.stderr


# -- issue 77.2: what the trainer's fast tests did not reach (the update's edges, the data-parallel and FSDP2 branches
# in a one-process group, the behaviour gap, entropy and the shared-prefix old log-probs) ---------------------------


def test_update_stats_as_metrics_names_every_field():
    from dataclasses import fields

    stats = UpdateStats(sequences=3, grad_norm=0.5)
    metrics = stats.as_metrics()
    assert set(metrics) == {"train/" + f.name for f in fields(UpdateStats)}
    assert metrics["train/sequences"] == 3.0 and metrics["train/grad_norm"] == 0.5
    assert all(type(v) is float for v in metrics.values())
    assert set(stats.as_metrics("x.")) == {"x." + f.name for f in fields(UpdateStats)}


def _weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _unchanged(before: dict[str, torch.Tensor], model) -> bool:
    return all(torch.equal(before[n], p.detach()) for n, p in model.named_parameters())


def test_an_update_with_no_loss_token_does_nothing_at_all(tiny_path):
    engine = RecordingEngine(False, True)
    tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(learning_rate=1e-2), engine=engine)
    before = _weights(tr.model)
    quiet = [s.model_copy(update={"loss_mask": [0] * len(s.token_ids)}) for s in _samples(2)]
    stats = tr.update(quiet)
    assert stats == UpdateStats(sequences=0) and engine.resets == 0 and _unchanged(before, tr.model)


def test_a_non_finite_update_takes_no_step_but_still_publishes(tiny_path):
    engine = RecordingEngine(False, True)
    cfg = TrainConfig(learning_rate=1e-2, kl_beta=0.0, autocast="off")
    tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), cfg, engine=engine)
    before = _weights(tr.model)
    nan = [s.model_copy(update={"token_advantages": [float("nan")] * len(s.token_ids)}) for s in _samples(2)]
    stats = tr.update(nan)
    assert stats.sequences == 2 and stats.optimizer_steps == 0 and stats.grad_norm == 0.0
    assert engine.resets == 1 and _unchanged(before, tr.model)


def test_the_behaviour_gap_is_the_mean_distance_to_the_samplers_log_probs_on_loss_tokens(tiny_path):
    guided, vanilla = _guided_pair()
    tr = GRPOTrainer(_sharp(tiny_path), TrainConfig(kl_beta=0.0, autocast="off", learning_rate=0.0))
    recomputed = tr._behaviour_logprobs([guided])[0]
    # the sampler's numbers: 0.25 off on every loss token, far off where nothing is trained
    recorded = [float(lp) + (0.25 if m else 50.0) for lp, m in zip(recomputed, guided.loss_mask)]
    vanilla_recorded = [0.0] * len(vanilla.token_ids)  # not guided: no behaviour pass, not counted
    stats = tr.update(
        [
            guided.model_copy(update={"rollout_logprobs": recorded}),
            vanilla.model_copy(update={"rollout_logprobs": vanilla_recorded}),
        ]
    )
    assert stats.behaviour_logprob_gap == pytest.approx(0.25, abs=1e-4)
    assert tr.update(_guided_pair()).behaviour_logprob_gap == 0.0  # no recorded log-probs: no gap


def test_several_epochs_still_compare_a_guided_sample_with_its_behaviour_policy(tiny_path):
    def dev(epochs: int) -> float:
        cfg = TrainConfig(kl_beta=0.0, autocast="off", learning_rate=0.0, ppo_epochs=epochs)
        return GRPOTrainer(_sharp(tiny_path), cfg).update(_guided_pair()).guided_ratio_dev

    one, two = dev(1), dev(2)
    assert one > 1e-3 and two == pytest.approx(one, rel=1e-4)  # lr 0: both epochs see the same ratios
    cfg = TrainConfig(kl_beta=0.0, autocast="off", learning_rate=0.0, ppo_epochs=2)
    assert GRPOTrainer(_sharp(tiny_path), cfg).update(_guided_pair()).guided_tokens == 40  # per epoch, not summed


def test_sequence_logprobs_and_entropy_by_hand(tiny_path):
    model = LocalLLM(str(tiny_path), device="cpu").model
    ids = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])
    attn = torch.ones_like(ids)
    logp, ent = sequence_logprobs(model, ids, attn, None, with_entropy=True, start=3)
    lsm = torch.log_softmax(model(input_ids=ids).logits.float(), dim=-1)[0].detach()
    assert logp.shape == ent.shape == ids.shape
    assert torch.all(logp[0, :3] == 0) and torch.all(ent[0, :3] == 0)
    for t in range(3, ids.shape[1]):
        assert float(logp[0, t].detach()) == pytest.approx(float(lsm[t - 1, ids[0, t]]), abs=1e-5)
        assert float(ent[0, t].detach()) == pytest.approx(float(-(lsm[t - 1].exp() * lsm[t - 1]).sum()), abs=1e-5)
    assert sequence_logprobs(model, ids, attn, None, start=3)[1] is None


def test_old_log_probs_through_a_shared_prefix_equal_the_plain_ones(tiny_path):
    prefix = [(5 * j) % 300 + 2 for j in range(40)]  # past MIN_SHARED (32): the prefix runs once
    samples = [
        TrainingSample(
            trajectory_id=f"s{i}",
            group_id="g",
            token_ids=prefix + [40 + i, 50 + i, 60 + i, 70 + i][: 2 + i],
            loss_mask=[0] * 36 + [1] * (6 + i),  # loss tokens inside the prefix too
            token_advantages=[1.0] * (42 + i),
            experience_mask=[0] * (42 + i),
        )
        for i in range(3)
    ]
    out = {}
    for shared in (True, False):
        tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(shared_prefix=shared, micro_batch_size=2))
        assert [p for _, p in tr._share_groups(samples, range(3))] == ([40] if shared else [0])
        out[shared] = tr._logprobs_no_grad(tr.model, samples)
    for a, b, s in zip(out[True], out[False], samples):
        assert a.shape == (len(s.token_ids),) and torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("sharding", ["replicate", "fsdp2"])
def test_a_one_process_group_updates_exactly_like_no_group(tiny_path, world_of_one, sharding):
    cfg = dict(learning_rate=1e-2, kl_beta=0.0, autocast="off", micro_batch_size=2)
    plain = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(**cfg))
    llm = LocalLLM(str(tiny_path), device="cpu")
    grouped = GRPOTrainer(llm, TrainConfig(**cfg, sharding=sharding), parallel=world_of_one)
    assert (grouped.sharded is not None) == (sharding == "fsdp2")
    a, b = plain.update(_samples()), grouped.update(_samples())
    assert (b.sequences, b.tokens, b.policy_tokens, b.optimizer_steps) == (a.sequences, a.tokens, a.policy_tokens, 1)
    for field in ("loss", "ratio", "grad_norm", "vanilla_ratio_dev"):
        assert getattr(b, field) == pytest.approx(getattr(a, field), rel=1e-4, abs=1e-7), field
    for name, weight in plain.model.state_dict().items():  # under fsdp2: rank 0's copy, synced from the shards
        assert torch.allclose(llm.model.state_dict()[name], weight, atol=1e-5), name


def test_idle_passes_run_the_model_without_changing_a_gradient(tiny_path):
    tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(kl_beta=0.0, autocast="off"))
    sample = _samples(1)[0]
    sequence_logprobs(tr.model, *[tr._collate([sample])[k] for k in ("ids", "attn")], None)[0].sum().backward()
    grads = {n: p.grad.clone() for n, p in tr.model.named_parameters() if p.grad is not None}
    calls = []
    hook = tr.model.register_forward_hook(lambda *_: calls.append(1))
    tr._idle_passes(2, sample, True)
    hook.remove()
    assert len(calls) == 2
    assert all(torch.equal(p.grad, grads[n]) for n, p in tr.model.named_parameters() if p.grad is not None)


def _forward_calls(model, record=lambda args, kwargs: kwargs):
    """A forward hook recording ``record(args, kwargs)`` of each call (default: its keyword arguments); returns
    (records, remove)."""
    calls = []

    def hook(_module, args, kwargs, _out):
        calls.append(record(args, kwargs))

    return calls, model.register_forward_hook(hook, with_kwargs=True).remove


def _forward_shapes(model):
    """A forward hook recording each call's input shape (rows, tokens); returns (shapes, remove)."""
    return _forward_calls(model, lambda args, kwargs: tuple(kwargs.get("input_ids", args[0] if args else None).shape))


@pytest.mark.parametrize("micro", [1, 2])
def test_old_log_probs_run_in_micro_batches_of_the_configured_size(tiny_path, micro):
    samples = _samples(3)  # three different sequences: no shared prefix
    tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(micro_batch_size=micro, autocast="off"))
    shapes, remove = _forward_shapes(tr.model)
    out = tr._logprobs_no_grad(tr.model, samples)
    remove()
    assert [rows for rows, _ in shapes] == ([1, 1, 1] if micro == 1 else [2, 1])  # each sample in one forward
    assert [o.shape[0] for o in out] == [len(s.token_ids) for s in samples]


def test_old_log_probs_through_a_shared_prefix_run_the_prefix_once(tiny_path):
    prefix = [(5 * j) % 300 + 2 for j in range(40)]
    samples = [
        TrainingSample(
            trajectory_id=f"s{i}",
            group_id="g",
            token_ids=prefix + [40 + i, 50 + i],
            loss_mask=[0] * 38 + [1] * 4,
            token_advantages=[1.0] * 42,
            experience_mask=[0] * 42,
        )
        for i in range(2)
    ]
    tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(shared_prefix=True, micro_batch_size=2))
    shapes, remove = _forward_shapes(tr.model)
    tr._logprobs_no_grad(tr.model, samples)
    remove()
    assert len(shapes) == 2 and shapes[0][0] == 1  # the prefix once, for one row; then the two suffixes together
    assert all(tokens < 42 for _, tokens in shapes)  # no forward over a whole sequence


def test_a_checkpoint_without_the_optimizer_writes_none(tiny_path, tmp_path):
    tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(kl_beta=0.0, autocast="off"))
    tr.update(_samples(2))
    assert (tr.save(tmp_path / "with") / "optimizer.pt").is_file()
    assert not (tr.save(tmp_path / "without", with_optimizer=False) / "optimizer.pt").exists()


def test_the_behaviour_gap_by_hand_skips_unrecorded_samples_and_the_first_position():
    """``_behaviour_gap``: mean |recorded − recomputed| over loss tokens from position 1 on (position 0 has no
    log-prob), over every guided sample that recorded its sampler's log-probs, whatever its place in the batch."""

    def sample(i, mask, recorded):
        n = len(mask)
        return TrainingSample(
            trajectory_id=f"t{i}", group_id="g", token_ids=list(range(1, n + 1)), loss_mask=mask,
            token_advantages=[0.0] * n, experience_mask=[0] * n, rollout_logprobs=recorded,
        )  # fmt: skip

    samples = [sample(0, [0, 1, 1], None), sample(1, [1, 1, 0, 1], [5.0, -1.0, -9.0, -2.0])]
    behaviour = {0: torch.tensor([0.0, -3.0, -3.0]), 1: torch.tensor([0.0, -1.25, 0.0, -2.5])}
    stats = UpdateStats()
    GRPOTrainer._behaviour_gap(samples, behaviour, stats)
    assert stats.behaviour_logprob_gap == pytest.approx((0.25 + 0.5) / 2)


def test_shuffle_seed_of_a_sample_without_tokens_by_hand():
    from evolvekit.train.trainer import shuffle_seed

    empty = TrainingSample(
        trajectory_id="e", group_id="g", token_ids=[], loss_mask=[], token_advantages=[], experience_mask=[]
    )
    assert shuffle_seed([empty], 2) == zlib.crc32(json.dumps([[0, 0]]).encode()) * 1009 + 2


def _perturbed(model):
    """A copy of ``model`` with noise on every weight: a reference that differs from the policy."""
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return ref


def test_the_kl_term_runs_the_reference_only_when_its_weight_is_above_zero(tiny_path):
    """kl_beta 0.5 with a reference that differs from the policy: the KL estimate is above 0. kl_beta 0: no
    reference is kept and none is run, LoRA's base model (the adapter switched off) included."""
    llm = LocalLLM(str(tiny_path), device="cpu")
    ref = _perturbed(llm.model)
    cfg = TrainConfig(kl_beta=0.5, autocast="off", learning_rate=0.0)
    assert GRPOTrainer(llm, cfg, reference_model=ref).update(_samples()).kl > 1e-4
    off = GRPOTrainer(llm, TrainConfig(kl_beta=0.0, autocast="off", learning_rate=0.0), reference_model=ref)
    assert off.reference is None and off.update(_samples()).kl == 0.0

    lora = GRPOTrainer(
        LocalLLM(str(tiny_path), device="cpu"),
        TrainConfig(lora=True, lora_rank=4, kl_beta=0.0, autocast="off", learning_rate=0.0),
    )
    entered = []
    original = lora.model.disable_adapter

    def recording():
        entered.append(1)
        return original()

    lora.model.disable_adapter = recording
    lora.update(_samples())
    assert entered == []


@pytest.mark.parametrize("mini", [0, 4])
def test_a_single_step_update_takes_its_old_log_probs_from_the_training_forward(tiny_path, mini):
    """One optimizer step over the whole batch (one epoch, no mini-batch smaller than the batch) is on-policy: the
    old log-probs come from the training forward itself, so the model runs once per micro-batch, no separate pass."""
    cfg = TrainConfig(micro_batch_size=2, mini_batch_size=mini, kl_beta=0.0, autocast="off", learning_rate=1e-3)
    tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), cfg)
    shapes, remove = _forward_shapes(tr.model)
    stats = tr.update(_samples())
    remove()
    assert stats.optimizer_steps == 1 and [rows for rows, _ in shapes] == [2, 2]


@pytest.mark.parametrize("epochs, mini", [(1, 2), (2, 0)])
def test_several_steps_compare_with_the_policy_before_the_first(tiny_path, epochs, mini):
    """Two optimizer steps (two mini-batches, or two epochs): the old log-probs are taken once, before the first
    step, so the second step's ratio departs from 1 (a fresh old policy per step would keep it at 1)."""
    cfg = TrainConfig(
        micro_batch_size=2, mini_batch_size=mini, ppo_epochs=epochs, kl_beta=0.0, autocast="off", learning_rate=5e-2
    )
    stats = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), cfg).update(_samples())
    assert stats.optimizer_steps == 2 and abs(stats.ratio - 1.0) > 1e-4


def _grads_of(path, samples, **train):
    llm = LocalLLM(str(path), device="cpu")
    cfg = TrainConfig(micro_batch_size=2, kl_beta=0.0, autocast="off", learning_rate=0.0, max_grad_norm=1e9)
    GRPOTrainer(llm, cfg.model_copy(update=train)).update(samples)
    return {n: p.grad.clone() for n, p in llm.model.named_parameters() if p.grad is not None}


def _grouped(group: str, weight: float, start: int, n: int = 2):
    out = []
    for i in range(n):
        L = 8 + 5 * i + start
        mask = [0] + [1] * (L - 1)  # loss tokens from position 1: every one counts in the denominators
        out.append(
            TrainingSample(
                trajectory_id=f"{group}{i}", group_id=group,
                token_ids=[(11 * i + j + start) % 400 + 1 for j in range(L)],
                loss_mask=mask, token_advantages=[0.0] + [1.0 if i else -1.0] * (L - 1), experience_mask=[0] * L,
                loss_group=group, loss_weight=weight,
            )
        )  # fmt: skip
    return out


@pytest.mark.parametrize("weight_b", [1.0, 0.5])
def test_loss_groups_sum_their_own_token_means_by_hand(tiny_path, weight_b):
    """Evolving-RL Eq. 6 through the trainer: with loss groups the gradient is Σ_g λ_g · (the gradient of group g's
    own token mean), exactly the sum of the updates on each group alone (each with its λ), even when every λ is 1."""
    a, b = _grouped("A", 1.0, 0), _grouped("B", weight_b, 3)
    together = _grads_of(tiny_path, a + b)
    alone_a, alone_b = _grads_of(tiny_path, a), _grads_of(tiny_path, b)
    for n, g in together.items():
        assert torch.allclose(g, alone_a[n] + alone_b[n], atol=1e-6), n  # each alone already carries its λ


def test_a_loss_weight_without_a_group_scales_the_gradient(tiny_path):
    plain = _samples()
    doubled = [s.model_copy(update={"loss_weight": 2.0}) for s in plain]
    base, twice = _grads_of(tiny_path, plain), _grads_of(tiny_path, doubled)
    for n, g in base.items():
        assert torch.allclose(twice[n], 2 * g, atol=1e-6), n


def test_without_a_reference_there_is_no_kl_term_and_against_itself_it_is_zero(tiny_path):
    """kl_beta above 0 but no reference (none given, no LoRA): the gradient is the one without a KL term. With a
    reference equal to the policy the KL estimate is 0."""
    assert all(
        torch.equal(g, h)
        for g, h in zip(
            _grads_of(tiny_path, _samples()).values(), _grads_of(tiny_path, _samples(), kl_beta=0.5).values()
        )
    )
    llm = LocalLLM(str(tiny_path), device="cpu")
    tr = GRPOTrainer(
        llm, TrainConfig(kl_beta=0.5, autocast="off", learning_rate=0.0), reference_model=copy.deepcopy(llm.model)
    )
    assert abs(tr.update(_samples()).kl) < 1e-6


def test_the_loss_is_the_token_mean_over_the_mini_batch_by_hand(tiny_path):
    """Eq. 17's denominator: every loss token of the mini-batch from position 1 on. The gradient over two samples is
    the token-weighted average of each one's own: (n_x·g_x + n_y·g_y) / (n_x + n_y)."""
    x, y = [s.model_copy(update={"loss_group": None}) for s in _grouped("A", 1.0, 0)]
    n_x, n_y = sum(x.loss_mask[1:]), sum(y.loss_mask[1:])
    both, g_x, g_y = _grads_of(tiny_path, [x, y]), _grads_of(tiny_path, [x]), _grads_of(tiny_path, [y])
    for n, g in both.items():
        assert torch.allclose(g, (n_x * g_x[n] + n_y * g_y[n]) / (n_x + n_y), atol=1e-6), n


@pytest.mark.parametrize("per_sample", [False, True])
def test_an_entropy_coefficient_changes_the_gradient_and_its_sign_matters(tiny_path, per_sample):
    """The entropy term (Evolving-RL Eq. 3's extractor penalty, or a trainer-wide bonus) reaches the loss: a
    coefficient of ±0.5, per sample or for the trainer, moves the gradient away from the one without it, and +0.5 and
    −0.5 move it by opposite amounts."""

    def grads(coef: float):
        llm = LocalLLM(str(tiny_path), device="cpu")
        cfg = TrainConfig(micro_batch_size=2, kl_beta=0.0, autocast="off", learning_rate=0.0, max_grad_norm=1e9)
        samples = _samples()
        if per_sample:
            samples = [s.model_copy(update={"entropy_coef": coef}) for s in samples]
        GRPOTrainer(llm, cfg, entropy_coef=0.0 if per_sample else coef).update(samples)
        return torch.cat([p.grad.flatten() for p in llm.model.parameters() if p.grad is not None])

    none, plus, minus = grads(0.0), grads(0.5), grads(-0.5)
    assert not torch.allclose(plus, none, atol=1e-6)
    assert torch.allclose(plus - none, none - minus, atol=1e-5)


def test_ratio_diagnostics_add_up_over_micro_batches(tiny_path):
    """The guided/vanilla ratio diagnostics are sums over every micro-batch: two guided samples (40 and 30 completion
    tokens) one per micro-batch report what one micro-batch of both reports, not the last micro-batch's share."""

    def stats(micro: int):
        a, b = _guided_pair(completion=40)[0], _guided_pair(completion=30)[0].model_copy(update={"trajectory_id": "h"})
        cfg = TrainConfig(micro_batch_size=micro, kl_beta=0.0, autocast="off", learning_rate=0.0)
        return GRPOTrainer(_sharp(tiny_path), cfg, eps_high_boost=0.6).update([a, b])

    one, two = stats(1), stats(2)
    assert one.guided_tokens == two.guided_tokens > 40
    assert one.guided_ratio_dev == pytest.approx(two.guided_ratio_dev, rel=1e-5)
    assert one.guided_clip_frac == pytest.approx(two.guided_clip_frac, rel=1e-5)


def test_the_log_ratio_clamp_reaches_the_update(tiny_path):
    """train.log_ratio_clamp reaches the loss: on a guided sample (its old log-probs from the sequence with the
    experience, far from the training forward's) a tight clamp changes the gradient; a clamp no ratio reaches leaves
    it exactly as without one."""

    def grads(clamp: float | None):
        llm = _sharp(tiny_path)
        cfg = TrainConfig(kl_beta=0.0, autocast="off", learning_rate=0.0, max_grad_norm=1e9, log_ratio_clamp=clamp)
        GRPOTrainer(llm, cfg).update(_guided_pair())
        return torch.cat([p.grad.flatten() for p in llm.model.parameters() if p.grad is not None])

    off = grads(None)
    assert torch.equal(grads(100.0), off)
    assert not torch.allclose(grads(1e-3), off, atol=1e-6)


def _prefix_pair():
    prefix = [(5 * j) % 300 + 2 for j in range(40)]
    return [
        TrainingSample(
            trajectory_id=f"s{i}",
            group_id="g",
            token_ids=prefix + [40 + i, 50 + i, 60 + i],
            loss_mask=[0] * 38 + [1] * 5,
            token_advantages=[1.0 if i else -1.0] * 43,
            experience_mask=[0] * 43,
        )
        for i in range(2)
    ]


@pytest.mark.parametrize("shared", [False, True])
def test_old_log_probs_run_under_the_training_forwards_autocast(tiny_path, shared):
    """Two epochs at learning rate 0 under bf16 autocast: the old log-probs (a separate no-grad pass, plain or through a
    shared prefix) are computed as the training forward computes, so every ratio is exactly 1; the same pass in fp32
    would leave bf16's rounding between them."""
    cfg = TrainConfig(
        micro_batch_size=2, ppo_epochs=2, kl_beta=0.0, autocast="bf16", learning_rate=0.0, shared_prefix=shared
    )
    stats = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), cfg).update(_prefix_pair())
    assert stats.optimizer_steps == 2 and stats.clip_frac == 0.0
    assert stats.vanilla_ratio_dev == 0.0 and stats.ratio == 1.0


@pytest.mark.parametrize("shared", [False, True])
def test_token_counts_and_throughput_by_hand(tiny_path, shared):
    """The update's token counts: every unpadded token forwarded per epoch, a shared prefix counted once (the rows
    after the first are counted as tokens not forwarded again), and the throughput as tokens over seconds."""
    cfg = TrainConfig(micro_batch_size=2, ppo_epochs=2, kl_beta=0.0, autocast="off", shared_prefix=shared)
    trainer = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), cfg)
    t0 = time.perf_counter()
    stats = trainer.update(_prefix_pair())
    elapsed = time.perf_counter() - t0
    saved = 40 if shared else 0  # the pair's common prefix (40 tokens) is forwarded once per pass, not twice
    assert (stats.tokens, stats.shared_prefix_tokens) == (2 * (86 - saved), 2 * saved)
    assert stats.policy_tokens == 2 * 5 and stats.sequences == 2  # loss tokens once, however many epochs
    assert 0.0 < stats.seconds <= elapsed and stats.tokens_per_s == stats.tokens / stats.seconds


# -- issue 77.2, the trainer's mutation look: its pure helpers, the collated batch and the update's statistics by hand -


def test_autocast_follows_the_setting_the_device_and_the_cpus_bf16(monkeypatch):
    """``auto`` is bf16 on CUDA or on a CPU with AVX512-BF16/AMX (the machine's probe), else off; ``bf16`` and
    ``off`` are taken as they are."""
    from types import SimpleNamespace

    from evolvekit.train import trainer as trainer_mod

    cpu, cuda = torch.device("cpu"), torch.device("cuda")

    def no_probe():
        raise AssertionError("the machine is probed only under auto")

    monkeypatch.setattr(trainer_mod.Machine, "probe", staticmethod(no_probe))
    assert trainer_mod.autocast_dtype("bf16", cpu) is torch.bfloat16 and trainer_mod.autocast_dtype("off", cpu) is None
    for has_bf16 in (True, False):
        monkeypatch.setattr(trainer_mod.Machine, "probe", staticmethod(lambda b=has_bf16: SimpleNamespace(cpu_bf16=b)))
        assert trainer_mod.autocast_dtype("auto", cpu) is (torch.bfloat16 if has_bf16 else None)
        assert trainer_mod.autocast_dtype("auto", cuda) is torch.bfloat16
        assert trainer_mod.autocast_dtype("off", cuda) is None


@pytest.mark.parametrize("start", [0, 1, 3, 7, 20])
def test_sequence_logprobs_from_any_start_by_hand(tiny_path, start):
    """Every position from ``start`` on (clamped to 1 … T−1: position 0 has nothing before it, the last one always
    counts) gets log π(token_t | tokens_<t); the earlier ones 0."""
    model = LocalLLM(str(tiny_path), device="cpu").model
    ids = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79], [2, 71, 82, 81, 82, 84, 59, 4]])
    with torch.no_grad():
        lsm = torch.log_softmax(model(input_ids=ids).logits.float(), dim=-1)
        logp, ent = sequence_logprobs(model, ids, torch.ones_like(ids), None, with_entropy=True, start=start)
    first = max(1, min(start, 7))
    for b in range(2):
        for t in range(8):
            want = float(lsm[b, t - 1, ids[b, t]]) if t >= first else 0.0
            want_ent = float(-(lsm[b, t - 1].exp() * lsm[b, t - 1]).sum()) if t >= first else 0.0
            assert float(logp[b, t]) == pytest.approx(want, abs=1e-5), (b, t)
            assert float(ent[b, t]) == pytest.approx(want_ent, abs=1e-5), (b, t)


def test_sequence_logprobs_under_bf16_autocast_are_fp32_from_the_bf16_forward(tiny_path):
    """Under autocast the forward runs in bf16 (its log-probs differ from the fp32 ones) and the log-probs
    are taken from its logits in fp32."""
    model = LocalLLM(str(tiny_path), device="cpu").model
    ids = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])
    attn = torch.ones_like(ids)
    with torch.no_grad():
        fp32, _ = sequence_logprobs(model, ids, attn, None)
        bf16, _ = sequence_logprobs(model, ids, attn, torch.bfloat16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=ids).logits
        by_hand = torch.log_softmax(logits.float(), dim=-1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
    assert fp32.dtype == bf16.dtype == torch.float32
    assert not torch.allclose(fp32, bf16, atol=1e-6)
    assert torch.allclose(bf16[0, 1:], by_hand, atol=1e-5)


def test_first_loss_position_by_hand():
    from evolvekit.train.trainer import first_loss_position

    assert first_loss_position(torch.tensor([[0.0, 0, 0, 1, 1], [0, 0, 1, 0, 0]])) == 2  # the earliest over rows
    assert first_loss_position(torch.tensor([[0.0, 0, 0, 0, 1]])) == 4
    assert first_loss_position(torch.zeros(2, 5)) == 1  # no loss token: from position 1, as without a start


def test_group_scales_of_a_group_without_loss_tokens_are_one():
    from evolvekit.train.trainer import group_scales

    quiet = TrainingSample(
        trajectory_id="q", group_id="g", token_ids=[1, 2, 3], loss_mask=[1, 0, 0], token_advantages=[0.0] * 3,
        experience_mask=[0] * 3, loss_group="extractor",
    )  # fmt: skip
    loud = quiet.model_copy(update={"loss_mask": [0, 1, 1], "loss_group": "solver"})
    assert group_scales([quiet, loud], 2.0) == [1.0, 1.0]


def test_the_collated_batch_by_hand(tiny_path):
    """Right-padded with the tokenizer's pad id; attention 1 on real tokens; the loss mask without experience tokens
    and without position 0 (nothing predicts it); advantages, the guided flags, loss weights and each sample's entropy
    coefficient plus the trainer's."""
    tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(autocast="off"), entropy_coef=0.25)
    a = TrainingSample(
        trajectory_id="a", group_id="g", token_ids=[5, 6, 7], loss_mask=[1, 1, 1], token_advantages=[0.5, 1.5, -2.0],
        experience_mask=[0, 1, 0], experience_guided=True, loss_weight=0.5, entropy_coef=-0.125,
    )  # fmt: skip
    b = TrainingSample(
        trajectory_id="b", group_id="g", token_ids=[8, 9, 10, 11, 12], loss_mask=[0, 0, 1, 1, 0],
        token_advantages=[0.0, 0.0, 3.0, 3.0, 0.0], experience_mask=[0] * 5,
    )  # fmt: skip
    batch = tr._collate([a, b])
    pad = tr.pad_id
    assert batch["ids"].tolist() == [[5, 6, 7, pad, pad], [8, 9, 10, 11, 12]]
    assert batch["attn"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch["mask"].tolist() == [[0.0, 0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0, 0.0]]
    assert batch["adv"].tolist() == [[0.5, 1.5, -2.0, 0.0, 0.0], [0.0, 0.0, 3.0, 3.0, 0.0]]
    assert batch["guided"].tolist() == [True, False]
    assert batch["weights"].tolist() == [0.5, 1.0]
    assert batch["entropy_coef"].tolist() == [0.125, 0.25]
    assert batch["ids"].dtype == batch["attn"].dtype == torch.long and batch["mask"].dtype == torch.float32


def test_a_reference_model_is_frozen_in_eval_mode_and_rollouts_default_to_the_policy(tiny_path):
    llm = LocalLLM(str(tiny_path), device="cpu")
    ref = copy.deepcopy(llm.model).train()
    tr = GRPOTrainer(llm, TrainConfig(kl_beta=0.1, autocast="off"), reference_model=ref)
    assert tr.reference is ref and not ref.training and not any(p.requires_grad for p in ref.parameters())
    assert tr.engine.caps.in_process  # no engine given: the policy itself generates


def test_the_reported_loss_is_its_parts_token_means_combined(tiny_path):
    """The update's ``loss`` is the token mean of the whole objective: pg_loss + β·KL − c_H·entropy, each a token
    mean, over micro-batches and mini-batches alike."""
    llm = LocalLLM(str(tiny_path), device="cpu")
    ref = _perturbed(llm.model)
    cfg = TrainConfig(kl_beta=0.5, autocast="off", learning_rate=0.0, micro_batch_size=1, mini_batch_size=2)
    st = GRPOTrainer(llm, cfg, reference_model=ref, entropy_coef=0.1).update(_samples())
    assert st.optimizer_steps == 2 and abs(st.pg_loss) > 1e-4 and st.kl > 1e-4 and st.entropy > 1.0
    assert st.loss == pytest.approx(st.pg_loss + 0.5 * st.kl - 0.1 * st.entropy, rel=1e-4)


def test_the_update_reports_the_largest_gradient_norm_of_its_steps(tiny_path):
    tr = GRPOTrainer(
        LocalLLM(str(tiny_path), device="cpu"),
        TrainConfig(kl_beta=0.0, autocast="off", learning_rate=1e-2, mini_batch_size=1, micro_batch_size=1),
    )
    norms, step = [], tr.policy.step

    def recording():
        norms.append(step())
        return norms[-1]

    tr.policy.step = recording
    stats = tr.update(_samples(3))
    assert len(norms) == stats.optimizer_steps == 3 and len(set(norms)) == 3
    assert stats.grad_norm == max(norms) > 0.0


def test_a_non_finite_mini_batch_skips_its_step_and_the_next_one_still_steps(tiny_path):
    first, second = _samples(2)  # sorted by length: the NaN sample's mini-batch comes first
    nan = first.model_copy(update={"token_advantages": [float("nan")] * len(first.token_ids)})
    cfg = TrainConfig(kl_beta=0.0, autocast="off", learning_rate=1e-2, mini_batch_size=1)
    tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), cfg)
    before = _weights(tr.model)
    stats = tr.update([nan, second])
    assert stats.optimizer_steps == 1 and stats.grad_norm > 0.0 and not _unchanged(before, tr.model)


@pytest.mark.parametrize("sharding", ["replicate", "fsdp2"])
def test_a_one_process_group_reports_every_statistic_like_no_group(tiny_path, world_of_one, sharding):
    """Every statistic of an update summed over a group of one is the one without a group (guided and vanilla ratio
    diagnostics, the boost's share, KL, entropy, loss), and the model runs once per micro-batch: no idle pass when no
    rank is busier."""
    cfg = dict(kl_beta=0.0, autocast="off", learning_rate=0.0, micro_batch_size=1, ppo_epochs=2, shared_prefix=False)
    plain = GRPOTrainer(_sharp(tiny_path), TrainConfig(**cfg), eps_high_boost=0.6, entropy_coef=0.1)
    grouped = GRPOTrainer(
        _sharp(tiny_path), TrainConfig(**cfg, sharding=sharding), eps_high_boost=0.6, entropy_coef=0.1,
        parallel=world_of_one,
    )  # fmt: skip
    a = plain.update(_guided_pair())
    shapes, remove = _forward_shapes(grouped.model)
    b = grouped.update(_guided_pair())
    remove()
    # the old log-probs (2 micro-batches), the guided sample's behaviour pass, then 2 epochs of 2 micro-batches
    assert len(shapes) == 2 + 1 + 2 * 2
    assert a.guided_ratio_dev > 1e-3 and a.guided_clip_frac > 0.0 and a.boost_changed_share > 0.0 and a.entropy > 1.0
    for name, value in a.as_metrics().items():
        if name not in ("train/seconds", "train/tokens_per_s"):
            assert b.as_metrics()[name] == pytest.approx(value, rel=1e-4, abs=1e-7), name


def test_fsdp2_trains_without_the_shared_prefix(tiny_path, world_of_one):
    """Under FSDP2 every pass is plain (the same number on every rank), even with train.shared_prefix on: the pair's
    common prefix is forwarded for each row, and the update is the shared-prefix one without FSDP2."""
    cfg = dict(micro_batch_size=2, kl_beta=0.0, autocast="off", learning_rate=1e-2, shared_prefix=True)
    shared = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(**cfg)).update(_prefix_pair())
    sharded = GRPOTrainer(
        LocalLLM(str(tiny_path), device="cpu"), TrainConfig(**cfg, sharding="fsdp2"), parallel=world_of_one
    ).update(_prefix_pair())
    assert (shared.tokens, shared.shared_prefix_tokens) == (86 - 40, 40)
    assert (sharded.tokens, sharded.shared_prefix_tokens) == (86, 0)
    assert sharded.loss == pytest.approx(shared.loss, rel=1e-4) and sharded.optimizer_steps == 1


def test_guided_statistics_stay_zero_without_guided_samples_and_are_shares_with_them(tiny_path):
    """The guided/vanilla diagnostics are shares of each kind's own loss tokens: an update of vanilla samples only
    (four steps, so later ratios leave 1) reports zero guided tokens and zero guided shares, and a vanilla deviation;
    a guided pair reports shares in (0, 1]."""
    cfg = TrainConfig(
        kl_beta=0.0, autocast="off", learning_rate=5e-2, mini_batch_size=2, micro_batch_size=2, ppo_epochs=2
    )
    vanilla = [s.model_copy(update={"experience_guided": False}) for s in _samples()]
    st = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), cfg, eps_high_boost=0.6).update(vanilla)
    assert st.optimizer_steps == 4 and st.guided_tokens == 0
    assert (st.guided_clip_frac, st.guided_ratio_dev, st.boost_changed_share) == (0.0, 0.0, 0.0)
    assert st.vanilla_ratio_dev > 1e-4 and 0.0 <= st.vanilla_clip_frac <= 1.0
    tr = GRPOTrainer(_sharp(tiny_path), TrainConfig(kl_beta=0.0, autocast="off", learning_rate=0.0), eps_high_boost=0.6)
    pair = tr.update(_guided_pair(adv_sign=1.0))
    assert 0.0 < pair.guided_clip_frac <= 1.0 and 0.0 < pair.boost_changed_share <= 1.0
    assert pair.guided_tokens == 40 and pair.vanilla_clip_frac == 0.0


def test_policy_tokens_count_every_loss_token_after_the_first(tiny_path):
    """A sample whose loss mask covers every position: the first token has no prediction, so 11 of 12 count."""
    s = TrainingSample(
        trajectory_id="t",
        group_id="g",
        token_ids=list(range(3, 15)),
        loss_mask=[1] * 12,
        token_advantages=[1.0] * 12,
        experience_mask=[0] * 12,
    )
    st = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(autocast="off", learning_rate=0.0)).update([s])
    assert st.policy_tokens == 11


@pytest.mark.parametrize("per_sample", [False, True])
def test_a_unit_entropy_coefficient_turns_the_entropy_on(tiny_path, per_sample):
    """An entropy coefficient of exactly 1 (for the trainer, or one sample's) computes the entropy; 0 does not."""

    def entropy(coef: float) -> float:
        samples = _samples()
        if per_sample:
            samples = [samples[0].model_copy(update={"entropy_coef": coef}), *samples[1:]]
        cfg = TrainConfig(kl_beta=0.0, autocast="off", learning_rate=0.0)
        return (
            GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), cfg, entropy_coef=0.0 if per_sample else coef)
            .update(samples)
            .entropy
        )

    assert entropy(0.0) == 0.0 and entropy(1.0) > 1.0


def _prefix_triple():
    pair = _prefix_pair()
    third = pair[1].model_copy(update={"trajectory_id": "s2", "token_ids": pair[1].token_ids[:40] + [70, 71, 72]})
    return [*pair, third]


@pytest.mark.parametrize("shared", [False, True])
def test_three_members_of_a_shared_prefix_and_their_entropy(tiny_path, shared):
    """Three samples sharing a 40-token prefix, micro-batches of two: the prefix is forwarded once, so two rows'
    worth of it (80 tokens) is saved; the entropy term is computed through the shared prefix as through plain passes."""
    cfg = TrainConfig(micro_batch_size=2, kl_beta=0.0, autocast="off", learning_rate=0.0, shared_prefix=shared)
    st = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), cfg, entropy_coef=0.1).update(_prefix_triple())
    assert (st.tokens, st.shared_prefix_tokens) == ((49, 80) if shared else (129, 0))
    plain = GRPOTrainer(
        LocalLLM(str(tiny_path), device="cpu"), cfg.model_copy(update={"shared_prefix": False}), entropy_coef=0.1
    ).update(_prefix_triple())
    assert st.entropy > 1.0 and st.entropy == pytest.approx(plain.entropy, rel=1e-5)


def test_a_rank_with_fewer_micro_batches_runs_zero_weighted_passes_up_to_the_busiest(
    tiny_path, world_of_one, monkeypatch
):
    """FSDP2: when another rank has more micro-batches in a mini-batch (here 5, through a stand-in for the group's
    maximum), this rank runs the difference as zero-weighted forward/backward passes of its mini-batch's first sample,
    so it joins every collective; its update is the one without them. Three samples in mini-batches of two and one,
    micro-batches of one: 2 + 1 passes of its own, so 3 + 4 idle passes."""
    cfg = TrainConfig(
        kl_beta=0.0,
        autocast="off",
        learning_rate=1e-2,
        mini_batch_size=2,
        micro_batch_size=1,
        shared_prefix=False,
        sharding="fsdp2",
    )
    samples = _samples(3)

    def update(busiest):
        if busiest is not None:
            monkeypatch.setattr(world_of_one, "max_int", lambda value: busiest)
        tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), cfg, parallel=world_of_one)
        shapes, remove = _forward_shapes(tr.model)
        stats = tr.update(samples)
        remove()
        return stats, shapes

    alone, own = update(None)
    busy, shapes = update(5)
    extra = Counter(shapes) - Counter(own)
    assert len(shapes) == len(own) + 3 + 4 and sum(extra.values()) == 7
    assert {rows for rows, _ in extra} == {1} and {width for _, width in extra} <= {10, 13, 16}  # one sample's row
    assert busy.optimizer_steps == alone.optimizer_steps == 2
    assert busy.grad_norm == pytest.approx(alone.grad_norm, rel=1e-6) and busy.loss == pytest.approx(alone.loss)


def test_the_training_forward_projects_logits_from_the_first_loss_position_only(tiny_path):
    """The plain path's forward asks the model for the logits from the first loss position on: the pair's loss starts
    at position 38 of 43, so 6 positions are projected (``logits_to_keep``), not 43. Every forward of an update (the
    old log-probs' no-grad pass of a two-epoch update included) gets the padding mask and builds no KV cache."""
    for epochs, keeps in ((1, [6]), (2, [6, 6, 6])):
        cfg = TrainConfig(kl_beta=0.0, autocast="off", shared_prefix=False, ppo_epochs=epochs)
        tr = GRPOTrainer(LocalLLM(str(tiny_path), device="cpu"), cfg)
        calls, remove = _forward_calls(tr.model)
        tr.update(_prefix_pair())
        remove()
        assert [c.get("logits_to_keep") for c in calls] == keeps
        assert all(c.get("use_cache") is False and c["attention_mask"].shape == (2, 43) for c in calls)


def test_a_models_error_without_autocast_surfaces_as_itself():
    """With autocast off the forward runs in a context that does nothing, and lets an error through as it is."""

    class Broken(torch.nn.Module):
        def forward(self, **_):
            raise ValueError("the model failed")

    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="the model failed"):
        sequence_logprobs(Broken(), ids, torch.ones_like(ids), None)


def test_the_trainer_keeps_its_llm_and_resolves_autocast_for_the_policys_device(tiny_path, monkeypatch):
    """Other stages read the trainer's LLM (the cold start resets its prefix cache) and device; autocast is resolved
    for the device the policy is on."""
    from evolvekit.train import trainer as trainer_mod

    seen = []
    monkeypatch.setattr(trainer_mod, "autocast_for", lambda setting, device, bf16: seen.append(device) or "off")
    llm = LocalLLM(str(tiny_path), device="cpu")
    tr = GRPOTrainer(llm, TrainConfig(autocast="bf16"))
    assert tr.llm is llm and tr.device == torch.device("cpu") and tr.amp is None
    assert seen == ["cpu"]
