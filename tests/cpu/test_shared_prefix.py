"""Shared-prefix training is exact: the same loss and the same gradient of every parameter as the unshared update."""

from __future__ import annotations

import copy

import pytest
import torch

from evolvekit.config import TrainConfig
from evolvekit.llm.local import LocalLLM
from evolvekit.llm.tiny import make_tiny_model
from evolvekit.train.shared_prefix import common_prefix_len, share_groups
from evolvekit.train.trainer import GRPOTrainer
from evolvekit.types import TrainingSample


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_common_prefix_and_groups_by_hand():
    assert common_prefix_len([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert common_prefix_len([[7, 8], [7, 8]]) == 2
    seqs = [[1] * 40 + [2, 3], [1] * 40 + [4], [9] * 50, [1] * 40 + [5, 6, 7], [9] * 10 + [8]]
    groups = share_groups(seqs, ["a", "a", "b", "a", "b"], min_shared=32)
    assert groups == [([0, 1, 3], 40), ([2, 4], 0)]  # b's common prefix (10) is too short to share
    # a member that is all prefix keeps one token of its own
    assert share_groups([[1] * 40, [1] * 40 + [2]], ["a", "a"], min_shared=32) == [([0, 1], 39)]
    assert share_groups([[1] * 40], ["a"], min_shared=32) == [([0], 0)]


def _group(prompt_len=48, seed=0, shared_first_turn=False):
    """A GRPO-shaped batch: two groups; each group's members share a prompt; multi-turn members (a completion,
    a tool result, a second completion); in group 'g0' optionally an identical first completion (loss tokens inside
    the shared prefix) and one experience-stripped guided sample."""
    g = torch.Generator().manual_seed(seed)

    def rand(n):
        return torch.randint(5, 480, (n,), generator=g).tolist()

    out = []
    for gid in ("g0", "g1"):
        prompt = rand(prompt_len)
        first = rand(6)
        for i in range(4):
            c1 = first if shared_first_turn and gid == "g0" else rand(5 + i)
            obs, c2 = rand(4), rand(3 + 2 * i)
            ids = prompt + c1 + obs + c2
            mask = [0] * len(prompt) + [1] * len(c1) + [0] * len(obs) + [1] * len(c2)
            adv = float((-1) ** i) * (0.5 + 0.25 * i)
            extra = {}
            if gid == "g0" and i == 3:  # generated with 5 experience tokens after the prompt, trained without
                extra = {
                    "experience_guided": True,
                    "behaviour_token_ids": prompt + rand(5) + ids[len(prompt) :],
                    "behaviour_positions": list(range(len(prompt)))
                    + [len(prompt) + 5 + j for j in range(len(ids) - len(prompt))],
                }
            out.append(
                TrainingSample(
                    trajectory_id=f"{gid}-{i}",
                    group_id=gid,
                    token_ids=ids,
                    loss_mask=mask,
                    token_advantages=[adv if m else 0.0 for m in mask],
                    experience_mask=[0] * len(ids),
                    **extra,
                )
            )
    return out


def _update(path, samples, shared, lora=False, amp="off", micro=2, ppo_epochs=1, mini=0, entropy=0.0):
    torch.manual_seed(0)
    llm = LocalLLM(str(path), device="cpu")
    ref = None if lora else copy.deepcopy(llm.model)
    cfg = TrainConfig(
        shared_prefix=shared,
        micro_batch_size=micro,
        kl_beta=0.01,
        autocast=amp,
        learning_rate=0.0,
        max_grad_norm=1e9,
        lora=lora,
        ppo_epochs=ppo_epochs,
        mini_batch_size=mini,
    )
    tr = GRPOTrainer(llm, cfg, eps_high_boost=0.6, reference_model=ref, entropy_coef=entropy)
    st = tr.update(samples)
    grads = {n: p.grad.detach().clone() for n, p in tr.model.named_parameters() if p.grad is not None}
    return st, grads


def _same(a, b, atol, rtol):
    st_a, g_a = a
    st_b, g_b = b
    assert g_a.keys() == g_b.keys() and g_a
    assert st_a.loss == pytest.approx(st_b.loss, abs=atol, rel=rtol)
    assert st_a.kl == pytest.approx(st_b.kl, abs=atol, rel=rtol)
    for k in g_a:
        assert torch.allclose(g_a[k], g_b[k], atol=atol, rtol=rtol), (k, (g_a[k] - g_b[k]).abs().max())


@pytest.mark.slow
@pytest.mark.parametrize("micro", [1, 2, 4])
def test_shared_equals_unshared_full_fine_tune(tiny_path, micro):
    samples = _group()
    shared = _update(tiny_path, samples, True, micro=micro, entropy=-0.01)
    plain = _update(tiny_path, samples, False, micro=micro, entropy=-0.01)
    assert shared[0].shared_prefix_tokens == 2 * 3 * 48 and plain[0].shared_prefix_tokens == 0
    assert shared[0].tokens == plain[0].tokens - shared[0].shared_prefix_tokens
    _same(shared, plain, atol=1e-6, rtol=1e-4)


def test_shared_equals_unshared_with_loss_tokens_inside_the_prefix(tiny_path):
    samples = _group(shared_first_turn=True)  # g0's members share prompt + first completion + ...
    assert common_prefix_len([s.token_ids for s in samples[:3]]) > 48
    _same(_update(tiny_path, samples, True), _update(tiny_path, samples, False), atol=1e-6, rtol=1e-4)


@pytest.mark.slow
def test_shared_equals_unshared_with_lora(tiny_path):
    samples = _group()
    _same(
        _update(tiny_path, samples, True, lora=True),
        _update(tiny_path, samples, False, lora=True),
        atol=1e-6,
        rtol=1e-4,
    )


@pytest.mark.slow
def test_shared_equals_unshared_with_old_logprob_passes_and_bf16(tiny_path):
    samples = _group()
    # several optimizer steps: old log-probs come from a separate (shared) no-grad pass
    _same(
        _update(tiny_path, samples, True, ppo_epochs=2, mini=4),
        _update(tiny_path, samples, False, ppo_epochs=2, mini=4),
        atol=1e-6,
        rtol=1e-4,
    )
    _same(
        _update(tiny_path, samples, True, amp="bf16"),
        _update(tiny_path, samples, False, amp="bf16"),
        atol=2e-3,
        rtol=5e-2,
    )


def test_evolving_rl_roles_share_within_their_groups(tiny_path):
    samples = [
        s.model_copy(
            update={
                "loss_group": "solver" if s.group_id == "g0" else "extractor",
                "loss_weight": 1.0 if s.group_id == "g0" else 0.2,
            }
        )
        for s in _group()
    ]
    _same(_update(tiny_path, samples, True), _update(tiny_path, samples, False), atol=1e-6, rtol=1e-4)


@pytest.mark.slow
def test_shared_equals_unshared_on_smollm2(smollm2):
    """One real batch on the embedded model: 4 samples sharing a chat prompt, fp32."""
    tok = smollm2.tokenizer
    from evolvekit.types import ChatMessage

    prompt = smollm2.apply_chat_template(
        [
            ChatMessage(role="system", content="You call tools. " * 40),
            ChatMessage(role="user", content="Add 3 and 4, then multiply by 2."),
        ]
    )
    completions = [
        '<tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}}</tool_call>',
        "The answer is 14.",
        '<tool_call>{"name": "multiply", "arguments": {"a": 7, "b": 2}}</tool_call>',
        "I do not know.",
    ]
    samples = []
    for i, text in enumerate(completions):
        comp = smollm2.encode(text) + [tok.eos_token_id]
        ids = list(prompt) + comp
        mask = [0] * len(prompt) + [1] * len(comp)
        samples.append(
            TrainingSample(
                trajectory_id=f"s{i}",
                group_id="g",
                token_ids=ids,
                loss_mask=mask,
                token_advantages=[(1.0 if i % 2 == 0 else -1.0) if m else 0.0 for m in mask],
                experience_mask=[0] * len(ids),
            )
        )

    def run(shared):
        model = copy.deepcopy(smollm2.model)
        from evolvekit.llm.packed import unpack_linears

        unpack_linears(model)
        llm = LocalLLM(tokenizer=tok, hf_model=model, device="cpu", packed_weights=False)
        tr = GRPOTrainer(
            llm,
            TrainConfig(
                shared_prefix=shared,
                micro_batch_size=2,
                kl_beta=0.0,
                autocast="off",
                learning_rate=0.0,
                max_grad_norm=1e9,
            ),
        )
        st = tr.update(samples)
        return st, {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}

    shared, plain = run(True), run(False)
    assert shared[0].shared_prefix_tokens == 3 * len(prompt)
    _same(shared, plain, atol=1e-5, rtol=1e-3)
