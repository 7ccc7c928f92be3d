"""Eq. 16/17, k3 KL and token-mean against hand-computed values."""

import math
import statistics

import pytest
import torch

from evolvekit.train.losses import (
    broadcast_to_tokens,
    clipped_surrogate,
    group_advantages,
    k3_kl,
    per_token_eps_high,
    policy_loss,
    token_mean,
)


def test_group_advantages_by_hand():
    # group a: rewards 1, 0, 0 -> mean 1/3, unbiased std sqrt(1/3) = 0.57735
    adv = group_advantages([1.0, 0.0, 0.0, 0.5, 0.5], ["a", "a", "a", "b", "b"], eps_norm=0.0)
    s = math.sqrt(1 / 3)
    assert adv[0] == pytest.approx((1 - 1 / 3) / s)
    assert adv[1] == pytest.approx((0 - 1 / 3) / s)
    assert adv[2] == pytest.approx(adv[1])
    # group b is degenerate (zero variance): neutralised, not NaN
    assert adv[3:] == [0.0, 0.0]


def test_group_advantages_eps_and_singletons():
    adv = group_advantages([1.0, 0.0], ["g", "g"], eps_norm=1e-6)
    std = math.sqrt(0.5)
    assert adv[0] == pytest.approx(0.5 / (std + 1e-6))
    assert group_advantages([3.0], ["solo"]) == [0.0]
    assert all(math.isfinite(a) for a in group_advantages([1.0, 1.0, 1.0], ["x"] * 3))
    with pytest.raises(ValueError):
        group_advantages([1.0], ["a", "b"])


def test_broadcast_to_tokens():
    out = broadcast_to_tokens({0: 1.5, 1: -2.0}, {0: (2, 4), 1: (6, 7)}, 8)
    assert out == [0, 0, 1.5, 1.5, 0, 0, -2.0, 0]


def test_k3_kl_by_hand():
    logp = torch.tensor([math.log(0.5), math.log(0.2)])
    ref = torch.tensor([math.log(0.25), math.log(0.2)])
    kl = k3_kl(logp, ref)
    # diff = log(0.25/0.5) = -log 2: exp(-log2) + log2 - 1 = 0.5 + 0.693147 - 1
    assert kl[0].item() == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert kl[1].item() == pytest.approx(0.0, abs=1e-7)


def test_clipped_surrogate_by_hand():
    old = torch.zeros(4)
    logp = torch.log(torch.tensor([1.5, 1.5, 0.5, 1.1]))
    adv = torch.tensor([2.0, -1.0, -1.0, 1.0])
    loss, clipped = clipped_surrogate(logp, old, adv, eps_low=0.2, eps_high=0.28)
    # ratio 1.5, A>0: clipped at 1.28 -> -2.56 ; ratio 1.5, A<0: min(-1.5, -1.28) = -1.5 -> 1.5
    # ratio 0.5, A<0: clip 0.8 -> min(-0.5, -0.8) = -0.8 -> 0.8 ; ratio 1.1 inside -> -1.1
    assert loss.tolist() == pytest.approx([-2.56, 1.5, 0.8, -1.1], abs=1e-5)
    assert clipped.tolist() == [1.0, 0.0, 1.0, 0.0]


def test_boosted_bound_binds_only_for_positive_advantage_of_guided_samples():
    adv = torch.tensor([[2.0, -1.0], [2.0, -1.0]])
    guided = torch.tensor([True, False])
    bounds = per_token_eps_high(adv, guided, 0.28, 0.6)
    assert bounds.flatten().tolist() == pytest.approx([0.6, 0.28, 0.28, 0.28])
    logp = torch.log(torch.full((2, 2), 1.5))
    loss, _ = clipped_surrogate(logp, torch.zeros(2, 2), adv, eps_low=0.28, eps_high=bounds)
    # guided, A>0: ratio 1.5 is inside 1.6 -> -3.0 ; vanilla, A>0: clipped at 1.28 -> -2.56
    assert loss[0, 0].item() == pytest.approx(-3.0, abs=1e-5)
    assert loss[1, 0].item() == pytest.approx(-2.56, abs=1e-5)
    # A<0: the boost changes nothing
    assert loss[0, 1].item() == pytest.approx(loss[1, 1].item())
    # no boost configured: same as vanilla
    assert per_token_eps_high(adv, guided, 0.28, None).flatten().tolist() == pytest.approx([0.28] * 4)


def test_token_mean_and_denominator():
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = torch.tensor([[0, 1, 1], [1, 0, 0]])
    assert token_mean(v, m).item() == pytest.approx((2 + 3 + 4) / 3)
    assert token_mean(v, m, denominator=6).item() == pytest.approx(9 / 6)
    assert token_mean(v, torch.zeros_like(m)).item() == 0.0


def test_policy_loss_on_policy_equals_minus_mean_advantage_and_has_grad():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.1]])).requires_grad_(True)
    adv = torch.tensor([[0.0, 1.0, -3.0]])
    mask = torch.tensor([[0, 1, 1]])
    loss, stats = policy_loss(
        logp,
        logp.detach(),
        adv,
        mask,
        torch.tensor([False]),
        eps_low=0.28,
        eps_high=0.28,
        ref_logprobs=logp.detach(),
        kl_beta=0.001,
    )
    assert loss.item() == pytest.approx(-(1.0 - 3.0) / 2)
    assert stats["kl"] == pytest.approx(0.0) and stats["ratio"] == pytest.approx(1.0)
    loss.backward()
    # d(-ρA)/d logp = -A·ρ = -A on policy, divided by the 2 masked tokens
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, -0.5, 1.5])


def test_policy_loss_entropy_term_sign():
    logp = torch.zeros(1, 2)
    ent = torch.tensor([[1.0, 3.0]])
    mask = torch.ones(1, 2)
    loss, stats = policy_loss(
        logp,
        logp,
        torch.zeros(1, 2),
        mask,
        torch.tensor([False]),
        eps_low=0.2,
        eps_high=0.2,
        entropy=ent,
        entropy_coef=-0.03,
    )
    # − c_H · H with c_H = −0.03 penalises entropy: +0.03 · mean(H) = 0.06
    assert loss.item() == pytest.approx(0.06)
    assert stats["entropy"] == pytest.approx(2.0)


def test_ratio_diagnostics_by_hand():
    import math

    from evolvekit.train.losses import ratio_diagnostics

    # one guided row (ratios 1.5, 1.2, 0.5, 1.7) and one vanilla row (ratio 1 everywhere); last guided token masked
    ratios = torch.tensor([[1.5, 1.2, 0.5, 1.7], [1.0, 1.0, 1.0, 1.0]])
    old = torch.zeros(2, 4)
    logp = torch.log(ratios)
    adv = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 1.0, -1.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    guided = torch.tensor([True, False])
    d = ratio_diagnostics(logp, old, adv, mask, guided, eps_low=0.28, eps_high=0.28, eps_high_boost=0.6)
    assert d["guided_tokens"] == 3 and d["vanilla_tokens"] == 4
    # guided, A > 0, bound 1.6: 1.5 unclipped, 1.2 unclipped, 0.5 unclipped (min picks ρA) -> 0 clipped
    assert d["guided_clipped"] == 0
    assert math.isclose(d["guided_ratio_dev"], 0.5 + 0.2 + 0.5, rel_tol=1e-6)
    # the boost changed 1.5 (in (1.28, 1.6]); 1.2 is under 1.28 either way
    assert d["boost_changed"] == 1
    off = ratio_diagnostics(logp, old, adv, mask, guided, eps_low=0.28, eps_high=0.28, eps_high_boost=None)
    assert off["guided_clipped"] == 1 and off["boost_changed"] == 0  # without it 1.5 is clipped
    assert d["vanilla_clipped"] == 0 and d["vanilla_ratio_dev"] == 0


def test_dual_clip_and_log_ratio_clamp_by_hand():
    """veRL's two options (issue 53, item 5), by hand: ρ = 5, ε = 0.2. A = −1: the clipped objective's loss is
    −min(−5, −1.2) = 5, and dual-clip with c = 3 bounds it at −A·c = 3; A = +1: −min(5, 1.2) = −1.2, untouched.
    The log-ratio clamp at 20 turns a log-ratio of 30 into ρ = e^20."""
    import math

    import torch

    from evolvekit.train.losses import clipped_surrogate

    lp = torch.tensor([[math.log(5.0), math.log(5.0)]])
    old = torch.zeros_like(lp)
    adv = torch.tensor([[-1.0, 1.0]])
    plain, _ = clipped_surrogate(lp, old, adv, 0.2, 0.2)
    assert plain.tolist()[0] == pytest.approx([5.0, -1.2])
    dual, taken = clipped_surrogate(lp, old, adv, 0.2, 0.2, dual_clip_c=3.0)
    assert dual.tolist()[0] == pytest.approx([3.0, -1.2]) and taken.tolist()[0] == [1.0, 1.0]
    far = torch.tensor([[30.0]])
    unclamped, _ = clipped_surrogate(far, torch.zeros_like(far), torch.tensor([[-1.0]]), 0.2, 0.2)
    clamped, _ = clipped_surrogate(far, torch.zeros_like(far), torch.tensor([[-1.0]]), 0.2, 0.2, log_ratio_clamp=20.0)
    assert unclamped.item() == pytest.approx(math.exp(30.0), rel=1e-5)
    assert clamped.item() == pytest.approx(math.exp(20.0), rel=1e-5)


# --- tests written from mutation testing's survivors in train/losses.py (benchmarks/results/mutation.md) ---------


def test_group_statistics_defaults_and_boundaries():
    from evolvekit.train.losses import broadcast_to_tokens, group_advantages, sample_std, standardize

    assert sample_std([3.0]) == 0.0 and sample_std([]) == 0.0
    assert standardize([0.0, 1.0], 0.0) == pytest.approx([-0.7071067811865476, 0.7071067811865476])  # default 1e-6
    sigma = statistics.stdev([0.0, 2.0])
    assert standardize([0.0, 2.0], 0.0, degenerate_std=sigma) == pytest.approx(
        [-0.7071067811865476, 0.7071067811865476]
    )
    assert group_advantages([0.0, 1.0], ["g", "g"]) == pytest.approx([-0.70710578, 0.70710578], abs=1e-8)  # ε 1e-6
    assert group_advantages([0.0, 1e-3, 5.0], ["g", "g", "alone"], degenerate_std=1e-2) == [0.0, 0.0, 0.0]
    assert broadcast_to_tokens({0: 2.0}, {0: (0, 2)}, 3) == [2.0, 2.0, 0.0]  # the first token is the step's too


def test_policy_loss_terms_have_their_signs_and_scales():
    from evolvekit.train.losses import policy_loss

    lp = torch.tensor([[-1.0, -2.0]])
    adv = torch.tensor([[1.0, -1.0]])
    mask = torch.ones(1, 2)
    guided = torch.tensor([False])
    base, stats = policy_loss(lp, lp.clone(), adv, mask, guided, eps_low=0.2, eps_high=0.2)
    assert "pg_loss" in stats and "clip_frac" in stats and stats["clip_frac"] == 0.0
    ref = lp - 0.5  # the reference differs: k3 KL > 0 adds to the loss
    with_kl, _ = policy_loss(
        lp, lp.clone(), adv, mask, guided, eps_low=0.2, eps_high=0.2, ref_logprobs=ref, kl_beta=0.1
    )
    assert float(with_kl) > float(base)
    no_beta, _ = policy_loss(lp, lp.clone(), adv, mask, guided, eps_low=0.2, eps_high=0.2, ref_logprobs=ref)
    assert float(no_beta) == float(base)  # kl_beta defaults to 0: the reference alone changes nothing
    entropy = torch.tensor([[1.0, 1.0]])
    with_ent, _ = policy_loss(lp, lp.clone(), adv, mask, guided, eps_low=0.2, eps_high=0.2, entropy=entropy)
    assert float(with_ent) == float(base)  # entropy_coef defaults to 0
    per_row, _ = policy_loss(
        lp, lp.clone(), adv, mask, guided, eps_low=0.2, eps_high=0.2, entropy=entropy, entropy_coef=torch.tensor([0.5])
    )
    assert float(per_row) == pytest.approx(float(base) - 0.5)  # a per-row coefficient, broadcast over tokens
    doubled, _ = policy_loss(lp, lp.clone(), adv * 0 + 1, mask, guided, eps_low=0.2, eps_high=0.2,
                             weights=torch.tensor([2.0]))  # fmt: skip
    single, _ = policy_loss(lp, lp.clone(), adv * 0 + 1, mask, guided, eps_low=0.2, eps_high=0.2)
    assert float(doubled) == pytest.approx(2 * float(single))
    halved, _ = policy_loss(lp, lp.clone(), adv, mask, guided, eps_low=0.2, eps_high=0.2, denominator=4.0)
    assert float(halved) == pytest.approx(float(base) * 2 / 4)


def test_the_boost_the_clamp_and_the_dual_clip_act_where_they_should():
    from evolvekit.train.losses import clipped_surrogate, per_token_eps_high, ratio_diagnostics

    adv = torch.tensor([[1.0, 0.0, -1.0], [1.0, 0.0, -1.0]])
    bounds = per_token_eps_high(adv, torch.tensor([True, False]), 0.28, 0.6)
    assert bounds.tolist() == [
        [pytest.approx(0.6), pytest.approx(0.28), pytest.approx(0.28)],
        [pytest.approx(0.28)] * 3,
    ]
    new, old = torch.tensor([[-10.0]]), torch.tensor([[0.0]])  # log-ratio −10
    clamped, _ = clipped_surrogate(new, old, torch.tensor([[-1.0]]), 0.2, 0.2, log_ratio_clamp=2.0)
    free, _ = clipped_surrogate(new, old, torch.tensor([[-1.0]]), 0.2, 0.2)
    assert float(clamped) == pytest.approx(float(free))  # −A·clip(ρ) wins either way at ρ ≪ 1 ...
    up, _ = clipped_surrogate(torch.tensor([[10.0]]), old, torch.tensor([[-1.0]]), 0.2, 0.2, log_ratio_clamp=2.0)
    assert float(up) == pytest.approx(math.exp(2.0))  # ... and ρ is clamped at e^2 from above
    down, _ = clipped_surrogate(new, old, torch.tensor([[1.0]]), 0.2, 0.2, log_ratio_clamp=2.0)
    assert float(down) == pytest.approx(-math.exp(-2.0))  # A > 0, ρ ≪ 1: −ρ·A with ρ clamped at e^−2 from below
    far, _ = clipped_surrogate(torch.tensor([[3.0]]), old, torch.tensor([[-1.0]]), 0.2, 0.2, dual_clip_c=3.0)
    assert float(far) == pytest.approx(3.0)  # negative advantage: the loss is capped at c·|A|
    pos, _ = clipped_surrogate(torch.tensor([[3.0]]), old, torch.tensor([[0.0]]), 0.2, 0.2, dual_clip_c=3.0)
    assert float(pos) == 0.0
    # ρ = e^0.3 ≈ 1.35: above 1 + ε_high, within the boost, on a guided token with A > 0 (and one with A = 0)
    diag = ratio_diagnostics(
        torch.tensor([[0.3, 0.3]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[1.0, 0.0]]), torch.ones(1, 2),
        torch.tensor([True]), eps_low=0.2, eps_high=0.28, eps_high_boost=0.6,
    )  # fmt: skip
    assert diag["guided_ratio_dev"] == pytest.approx(2 * (math.exp(0.3) - 1.0))
    assert diag["boost_changed"] == 1.0  # the A = 0 token is not boosted
    at_bound = ratio_diagnostics(
        torch.tensor([[math.log(1.28)]]), torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.ones(1, 1),
        torch.tensor([True]), eps_low=0.2, eps_high=0.28, eps_high_boost=0.6,
    )  # fmt: skip
    assert at_bound["boost_changed"] == 0.0  # ρ exactly 1 + ε_high is not clipped without the boost


# -- from the survivors of mutation testing train/losses.py (benchmarks/results/mutation.md) ---------------------------


def _one(logp: float, adv: float, guided: bool = False, **kw):
    """policy_loss on one token with old log-prob 0 (ratio e^logp), ε_low 0.2, ε_high 0.28."""
    t = torch.tensor([[logp]], dtype=torch.float64)
    return policy_loss(
        t, torch.zeros_like(t), torch.tensor([[adv]], dtype=torch.float64), torch.ones_like(t),
        torch.tensor([guided]), eps_low=0.2, eps_high=0.28, **kw,
    )  # fmt: skip


def test_policy_loss_passes_the_log_ratio_clamp_and_the_dual_clip_to_the_surrogate():
    # A = −1, ρ = e³ ≈ 20.09: the unclipped branch wins, loss ρ
    assert float(_one(3.0, -1.0)[0]) == pytest.approx(math.exp(3.0))
    assert float(_one(3.0, -1.0, log_ratio_clamp=1.0)[0]) == pytest.approx(math.e)  # ρ = e^clamp(3, 1)
    loss, stats = _one(3.0, -1.0, dual_clip_c=3.0)
    assert float(loss) == pytest.approx(3.0) and stats["clip_frac"] == 1.0  # bounded by −A·c, counted as clipped


def test_policy_loss_boosts_the_upper_bound_of_guided_tokens_only():
    # A = +1, ρ = e^0.3 ≈ 1.35: clipped at 1.28 without the boost, unclipped under ε̂_high = 0.6
    assert float(_one(0.3, 1.0, guided=True, eps_high_boost=0.6)[0]) == pytest.approx(-math.exp(0.3))
    assert float(_one(0.3, 1.0, guided=False, eps_high_boost=0.6)[0]) == pytest.approx(-1.28)
    assert float(_one(0.3, 1.0, guided=True)[0]) == pytest.approx(-1.28)


def test_policy_loss_per_sample_entropy_coefficients_weights_and_denominator_by_hand():
    logp = torch.zeros(2, 3, dtype=torch.float64)  # ρ = 1 and A = 0: the surrogate is 0
    entropy = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
    kw = dict(
        eps_low=0.2, eps_high=0.28, entropy=entropy, entropy_coef=torch.tensor([0.1, -0.2], dtype=torch.float64),
        weights=torch.tensor([1.0, 2.0], dtype=torch.float64),
    )  # fmt: skip
    args = (logp, logp.clone(), torch.zeros_like(logp), torch.ones_like(logp), torch.tensor([False, False]))
    # −c·H·w per token: row 0 −0.1·(1+2+3)·1 = −0.6, row 1 +0.2·(4+5+6)·2 = 6.0; Σ = 5.4
    loss, stats = policy_loss(*args, **kw)  # type: ignore[arg-type]
    assert float(loss) == pytest.approx(5.4 / 6)
    assert float(policy_loss(*args, denominator=12, **kw)[0]) == pytest.approx(5.4 / 12)  # type: ignore[arg-type]
    assert stats["pg_loss"] == 0.0 and stats["entropy"] == pytest.approx(3.5) and stats["ratio"] == 1.0


def test_policy_loss_with_kl_beta_zero_computes_no_kl():
    _, stats = _one(0.1, 1.0, ref_logprobs=torch.tensor([[0.5]], dtype=torch.float64), kl_beta=0.0)
    assert "kl" not in stats
    _, stats = _one(0.1, 1.0, ref_logprobs=torch.tensor([[0.5]], dtype=torch.float64), kl_beta=0.1)
    assert stats["kl"] == pytest.approx(math.exp(0.4) - 0.4 - 1.0)


def test_dual_clip_leaves_positive_advantages_and_exact_ties_alone():
    one = torch.zeros(1, 1, dtype=torch.float64)
    loss, taken = clipped_surrogate(one, one, torch.tensor([[0.5]], dtype=torch.float64), 0.2, 0.28, dual_clip_c=3.0)
    assert float(loss) == -0.5 and float(taken) == 0.0 and taken.dtype == loss.dtype
    # A = −1, ρ = 1, c = 1: the loss equals the bound −A·c exactly; not a dual-clipped token
    loss, taken = clipped_surrogate(one, one, torch.tensor([[-1.0]], dtype=torch.float64), 0.2, 0.28, dual_clip_c=1.0)
    assert float(loss) == 1.0 and float(taken) == 0.0


def test_token_mean_of_one_token_and_group_advantages_errors():
    assert float(token_mean(torch.tensor([[2.5]]), torch.tensor([[1]]))) == 2.5
    with pytest.raises(ValueError, match="^rewards and group_ids differ in length$"):
        group_advantages([1.0, 0.0], ["g"])


def test_standardize_gives_zeros_for_a_non_finite_population():
    from evolvekit.train.losses import standardize

    assert standardize([float("nan"), 1.0], 1e-6) == [0.0, 0.0]
    assert standardize([float("inf"), 1.0], 1e-6) == [0.0, 0.0]


def test_ratio_diagnostics_with_old_logprobs_and_the_boost_window():
    from evolvekit.train.losses import ratio_diagnostics

    # old log-prob −0.5, new −0.2: ρ = e^0.3 ≈ 1.35 on both tokens of the guided row (A = +1), 1 on the vanilla row
    logp = torch.tensor([[-0.2, -0.2], [-0.5, -0.5]], dtype=torch.float64)
    old = torch.full_like(logp, -0.5)
    adv = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    out = ratio_diagnostics(
        logp, old, adv, torch.ones_like(logp), torch.tensor([True, False]), eps_low=0.2, eps_high=0.28,
        eps_high_boost=0.6,
    )  # fmt: skip
    dev = math.exp(0.3) - 1.0
    assert out["guided_tokens"] == 2 and out["vanilla_tokens"] == 2
    assert out["guided_ratio_dev"] == pytest.approx(2 * dev) and out["vanilla_ratio_dev"] == pytest.approx(0.0)
    assert out["boost_changed"] == 2 and out["guided_clipped"] == 0 and out["vanilla_clipped"] == 0


def test_guided_flags_may_be_integers_and_the_boost_window_includes_its_upper_end():
    from evolvekit.train.losses import ratio_diagnostics

    logp = torch.full((2, 1), 0.25, dtype=torch.float64)  # ρ = e^0.25 on both rows, A = +1
    old, adv, mask = torch.zeros_like(logp), torch.ones_like(logp), torch.ones_like(logp)
    boost = float(torch.exp(torch.tensor(0.25, dtype=torch.float64))) - 1.0  # 1 + ε̂_high = ρ exactly
    flags = torch.tensor([1, 0])  # 0/1 integers, as a collated batch may carry them
    bounds = per_token_eps_high(adv, flags, 0.2, boost)
    assert bounds[:, 0].tolist() == [boost, 0.2]
    out = ratio_diagnostics(logp, old, adv, mask, flags, eps_low=0.2, eps_high=0.2, eps_high_boost=boost)
    assert out["guided_tokens"] == 1 and out["boost_changed"] == 1  # ρ ≤ 1 + ε̂_high: unclipped with the boost
