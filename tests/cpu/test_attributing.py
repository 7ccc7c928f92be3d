"""Self-attributing: Eq. 18-21 by hand on a group of different lengths, degenerate cases, the parser (fuzzed),
the attributor's retry/neutralise path, and the token broadcast."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evolvekit.attributing.attributor import StepAttributor
from evolvekit.attributing.credit import (
    fuse,
    group_step_advantages,
    returns_to_go,
    standardize_attribution,
    standardize_outcome,
)
from evolvekit.attributing.prompts import SYSTEM_PROMPT, parse_attribution, user_prompt
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.train.samples import build_samples
from evolvekit.types import ChatMessage, Step, StepLabel, Task, Trajectory

G, B = StepLabel.GOOD, StepLabel.BAD


def test_eq_18_to_21_by_hand():
    labels = [[G, B, G], [B, B], [G]]
    outcomes = [1.0, 0.0, 0.0]
    adv = group_step_advantages(labels, outcomes, [3, 2, 1], alpha=0.1, eps=0.0)
    # Eq. 18: trajectory means 1/3, -1, 1 -> mu = 1/9, unbiased sigma = sqrt(168/162)
    mu, sigma = 1 / 9, math.sqrt(168 / 162)
    a1 = [(1 - mu) / sigma, (-1 - mu) / sigma, (1 - mu) / sigma]
    # Eq. 19: outcomes 1, 0, 0 -> mean 1/3, sigma sqrt(1/3)
    o = [(1 - 1 / 3) / math.sqrt(1 / 3), (0 - 1 / 3) / math.sqrt(1 / 3)]
    # Eq. 20 then Eq. 21 for trajectory 1
    r = [0.1 * a1[0], 0.1 * a1[1], 0.1 * a1[2] + o[0]]
    assert adv[0] == pytest.approx([r[0] + r[1] + r[2], r[1] + r[2], r[2]])
    a2 = [(-1 - mu) / sigma] * 2
    assert adv[1] == pytest.approx([0.1 * a2[0] + 0.1 * a2[1] + o[1], 0.1 * a2[1] + o[1]])
    assert adv[2] == pytest.approx([0.1 * (1 - mu) / sigma + o[1]])


def test_ablation_modes():
    labels, outcomes = [[G, B], [B, G]], [1.0, 0.0]
    out_only = group_step_advantages(labels, outcomes, [2, 2], alpha=0.1, mode="outcome_only", eps=0.0)
    o = 0.5 / math.sqrt(0.5)
    assert out_only == [pytest.approx([o, o]), pytest.approx([-o, -o])]  # = plain GRPO for every step
    attr_only = group_step_advantages(labels, outcomes, [2, 2], alpha=0.1, mode="attribution_only", eps=0.0)
    # both trajectories average 0: the attribution channel is degenerate -> neutralised
    assert attr_only == [[0.0, 0.0], [0.0, 0.0]]


def test_degenerate_channels_and_neutralised_trajectories():
    assert standardize_outcome([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert standardize_outcome([0.3]) == [0.0]
    assert standardize_attribution([[1.0, 1.0], [1.0]]) == [[0.0, 0.0], [0.0]]
    from evolvekit.attributing.credit import attribution_degenerate

    assert attribution_degenerate([[1.0, 1.0], [1.0]]) and attribution_degenerate([[1.0, -1.0], None])
    assert not attribution_degenerate([[1.0, -1.0], [1.0]])  # averages 0 and 1
    # a neutralised trajectory (None) is left out of the statistics and gets attribution 0
    z = standardize_attribution([[1.0], [-1.0], None], eps=0.0)
    assert z[2] == [] and z[0][0] == pytest.approx(1 / math.sqrt(2))
    adv = group_step_advantages([[G], [B], None], [1.0, 0.0, 0.0], [1, 1, 3], alpha=0.1, eps=0.0)
    o_neg = (0 - 1 / 3) / math.sqrt(1 / 3)
    assert adv[2] == pytest.approx([o_neg] * 3)  # outcome channel only, at the last step, carried back by Eq. 21
    assert all(math.isfinite(x) for a in adv for x in a)


def test_fuse_and_returns_to_go():
    assert fuse([1.0, -1.0], 2.0, 0.5) == [0.5, -0.5 + 2.0]
    assert returns_to_go([1.0, 2.0, 3.0]) == [6.0, 5.0, 3.0]
    assert returns_to_go([]) == []


def test_parser_accepts_variants():
    text = (
        "Let me think.\nStep 0 Analysis: fine.\n**Step 0 Judgment:** good\nstep 1 judgement: `BAD`\n"
        "Step 2: Good\nStep 7 Judgment: BAD\nStep 1 Judgment: GOOD\nThanks!"
    )
    parsed = parse_attribution(text, 3)
    assert parsed.labels == [G, G, G]  # step 1 revised to GOOD (last wins); step 7 does not exist
    assert parse_attribution("Step 0 Judgment: GOOD", 2).labels is None
    assert "1" in parse_attribution("Step 0 Judgment: GOOD", 2).problem
    assert parse_attribution("Step 0 Analysis: this was bad", 1).labels is None  # analysis prose is not a label


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400), st.integers(min_value=0, max_value=6))
def test_parser_never_crashes(text, n):
    parsed = parse_attribution(text, n)
    assert parsed.labels is None or len(parsed.labels) == n


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["GOOD", "BAD", "good", "Bad"]), min_size=1, max_size=6), st.text(max_size=40))
def test_parser_reads_well_formed_answers_amid_noise(labels, noise):
    noise = noise.replace("tep", "")  # keep the noise from forming step judgments of its own
    body = "\n".join(f"{noise}\nStep {i} Analysis: x\nStep {i} Judgment: {lab}\n" for i, lab in enumerate(labels))
    parsed = parse_attribution(body + "\n" + noise, len(labels))
    assert parsed.labels == [G if lab.upper() == "GOOD" else B for lab in labels]


def _traj(n, reward, task_id="t"):
    return Trajectory(
        task_id=task_id,
        group_id="g",
        outcome_reward=reward,
        steps=[Step(index=i, action_text=f"a{i}", observation=f"o{i}") for i in range(n)],
    )


class _Scripted:
    """Test double of an LLM: answers from a list, in order."""

    name = "scripted"

    def __init__(self, answers):
        self.answers, self.seen, self.temperatures = list(answers), [], []

    def chat(self, conversations, params):
        self.temperatures.append(params.temperature)
        out = []
        for conv in conversations:
            self.seen.append(conv)
            out.append([Completion(text=self.answers.pop(0), token_ids=[1, 2], prompt_token_ids=[1] * 10)])
        return out


def test_attributor_retries_then_neutralises():
    llm = _Scripted(["Step 0 Judgment: GOOD\nStep 1 Judgment: BAD", "garbage", "still garbage", "no"])
    attributor = StepAttributor(llm, SamplingParams(temperature=0.0), max_retries=2, concurrency=4)
    res = attributor.attribute([_traj(2, 1.0), _traj(1, 0.0)], {"t": Task(task_id="t", env_name="x", query="do it")})
    assert res.labels == [[G, B], None]
    assert res.failures == 1 and res.cost.calls == 4 and res.cost.retries == 2
    assert llm.temperatures == [0.0, 0.7, 0.7]  # a greedy retry would repeat itself: retries sample
    m = res.metrics()
    assert m["attribution/good_ratio"] == 0.5 and m["attribution/parse_failure_rate"] == 0.5
    assert llm.seen[0][0].content == SYSTEM_PROMPT
    assert "OVERALL PERFORMANCE SCORE 1" in llm.seen[0][1].content and "do it" in llm.seen[0][1].content


def test_user_prompt_structure():
    text = user_prompt(Task(task_id="t", env_name="x", query=["first", "second"]), _traj(2, 0.0), 0.0)
    assert ">>> EVAL-STEP 0 <<<" in text and ">>> EVAL-STEP 1 <<<" in text and "total 2 steps" in text
    assert "<ACTION> a1 <END>" in text and "Step 1 Judgment: GOOD/BAD" in text and "first\nsecond" in text


def test_step_advantages_broadcast_to_their_tokens():
    t = _traj(2, 1.0)
    t.steps[0].prompt_token_ids, t.steps[0].completion_token_ids = [1, 2, 3], [4, 5]
    t.steps[1].prompt_token_ids, t.steps[1].completion_token_ids = [1, 2, 3, 4, 5, 6], [7, 8, 9]
    samples, _ = build_samples([t], [{0: 0.7, 1: -0.2}])
    s = samples[0]
    assert s.token_ids == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert s.loss_mask == [0, 0, 0, 1, 1, 0, 1, 1, 1]
    assert s.token_advantages == [0, 0, 0, 0.7, 0.7, 0, -0.2, -0.2, -0.2]


def test_steps_at_0_9_and_auc():
    from evolvekit.attributing.efficiency import area_under_curve, steps_to_fraction

    steps, vals = [0, 4, 8, 12], [0.2, 0.5, 0.7, 0.8]
    assert steps_to_fraction(steps, vals, 0.9 * 0.8) == 12
    assert steps_to_fraction(steps, vals, 0.9 * 0.7) == 8
    assert steps_to_fraction(steps, vals, 0.95) is None
    # trapezoids: 4*(0.35) + 4*(0.6) + 4*(0.75) = 6.8 over a span of 12
    assert area_under_curve(steps, vals) == pytest.approx(6.8 / 12)
    assert area_under_curve([3], [0.4]) == 0.4


def test_attributed_samples_share_the_hybrid_proxy_task_decay(tmp_path):
    """Self-attributing reuses GRPOSamples' build: proxy-task advantages are decayed by 0.5 when λ < 1."""
    from evolvekit.attributing.stage import AttributedSamples
    from evolvekit.config import load_config
    from evolvekit.orchestrator.stages import IterationContext
    from evolvekit.store.sqlite import RunStore
    from evolvekit.types import TaskSource

    cfg = load_config(
        None,
        [
            "questioning.enabled=true",
            "questioning.hybrid_lambda=0.5",
            "attributing.enabled=true",
            "attributing.mode=outcome_only",
        ],
    )
    store = RunStore(tmp_path / "run.db")
    tasks = [
        Task(task_id="real", env_name="x", query="q"),
        Task(task_id="syn", env_name="x", query="q", source=TaskSource.SYNTHETIC),
    ]
    with store.transaction() as c:
        store.put_tasks(c, tasks, -1)
    trajs = []
    for tid in ("real", "syn"):
        for r in (1.0, 0.0):
            t = _traj(1, r, tid)
            t.group_id = tid
            t.steps[0].prompt_token_ids, t.steps[0].completion_token_ids = [1, 2], [3]
            trajs.append(t)
    ctx = IterationContext(iteration=0, seed=0, run_dir=tmp_path, store=store)
    from evolvekit.orchestrator.build import sample_stage_for

    stage = sample_stage_for(cfg)  # what a run builds: the decay is questioning's collaborator of the sample stage
    assert isinstance(stage, AttributedSamples) and stage.advantage_scale is not None
    samples, metrics = stage.build(ctx, trajs)
    plain, _ = AttributedSamples.from_config(cfg, None).build(ctx, trajs)  # without the collaborator: no decay
    assert [s.token_advantages[-1] for s in plain][2] == pytest.approx([s.token_advantages[-1] for s in plain][0])
    adv = [s.token_advantages[-1] for s in samples]
    assert adv[0] == pytest.approx(-adv[1]) and adv[0] > 0  # the real task's group: full advantages
    assert adv[2] == pytest.approx(adv[0] * 0.5) and adv[3] == pytest.approx(adv[1] * 0.5)  # proxy task: × 0.5
    assert metrics["attribution/alpha"] == cfg.attributing.alpha and metrics["samples/groups"] == 2
    assert metrics["attribution/constant_channel_groups"] == 2  # no labels at all (outcome only)
    store.close()


def test_forced_choice_picks_by_log_probability():
    import random

    from evolvekit.llm.choice import choose

    rng = random.Random(0)
    assert choose([-0.1, -2.0], 0.0, rng) == 0 and choose([-3.0, -0.5], 0.0, rng) == 1
    draws = [choose([math.log(0.8), math.log(0.2)], 1.0, rng) for _ in range(2000)]
    assert 0.75 < draws.count(0) / 2000 < 0.85  # sampled from the two-way softmax


def test_constrained_attributor_labels_every_step_and_never_fails(tmp_path):
    from evolvekit.attributing.constrained import ConstrainedLabeler
    from evolvekit.llm.local import LocalLLM
    from evolvekit.llm.tiny import make_tiny_model

    llm = LocalLLM(str(make_tiny_model(tmp_path / "m")), device="cpu")
    attributor = StepAttributor(llm, SamplingParams(temperature=0.0), constrained=True)
    trajs = [_traj(3, 1.0), _traj(1, 0.0), _traj(0, 0.0)]
    res = attributor.attribute(trajs, {"t": Task(task_id="t", env_name="x", query="do it")})
    assert [len(lab) for lab in res.labels] == [3, 1, 0] and res.failures == 0
    assert all(lab in (G, B) for labs in res.labels for lab in labs)
    assert res.cost.calls == 2 and res.cost.completion_tokens >= 4
    # the choice really follows the model: the label with the higher full-sequence log-probability wins
    labeler = ConstrainedLabeler(llm, 0.0)
    conv = [ChatMessage(role="user", content="judge")]
    ids = llm.apply_chat_template(conv) + llm.encode("Step 0 Judgment:")
    import torch

    with torch.no_grad():

        def seq_lp(label_ids):
            full = torch.tensor([ids + label_ids])
            lp = torch.log_softmax(llm.model(input_ids=full).logits[0].float(), -1)
            return sum(float(lp[len(ids) - 1 + j, t]) for j, t in enumerate(label_ids))

        want = G if seq_lp(labeler.label_ids[0]) >= seq_lp(labeler.label_ids[1]) else B
    assert labeler.label(conv, 1)[0] == [want]


def test_llm_labels_are_scored_against_grounded_ones_where_a_reference_exists(tmp_path):
    """attributing.source: llm logs the attributor's measured accuracy: its labels' agreement with the grounded
    labels on tasks with a reference (here the LLM says GOOD, BAD where execution says BAD, GOOD: 0 of 2)."""
    from evolvekit.attributing.stage import AttributedSamples
    from evolvekit.config import load_config
    from evolvekit.orchestrator.stages import IterationContext
    from evolvekit.store.sqlite import RunStore
    from evolvekit.types import CallOutcome, ToolCall

    cfg = load_config(None, ["attributing.enabled=true", "attributing.source=llm", "attributing.constrained=off"])
    store = RunStore(tmp_path / "run.db")
    ref = [[ToolCall(name="add", arguments={"a": 1, "b": 2})]]
    with store.transaction() as c:
        store.put_tasks(c, [Task(task_id="t", env_name="x", query="1 plus 2?", reference_solution=ref)], -1)
    win = _traj(2, 1.0)
    win.steps[0].tool_calls, win.steps[0].calls = ref[0], [CallOutcome(name="add")]  # reference call: GOOD
    lose = _traj(2, 0.0)
    lose.steps[0].tool_calls = [ToolCall(name="add", arguments={"a": 1, "b": 3})]  # wrong call, stateless: BAD
    lose.steps[0].calls = [CallOutcome(name="add")]
    for t in (win, lose):
        t.steps[0].prompt_token_ids, t.steps[0].completion_token_ids = [1, 2], [3]
    llm = _Scripted(["Step 0 Judgment: BAD\nStep 1 Judgment: BAD", "Step 0 Judgment: GOOD\nStep 1 Judgment: GOOD"])
    stage = AttributedSamples.from_config(cfg, StepAttributor(llm, SamplingParams(temperature=0.0)))
    _, metrics = stage.build(IterationContext(0, 0, tmp_path, store), [win, lose])
    # grounded: win [GOOD, GOOD] (answer after a pass), lose [BAD, BAD]; the LLM said the opposite everywhere
    assert metrics["attribution/agreement_with_grounded"] == 0.0
    assert win.attribution_source == "llm" and win.step_attributions == [StepLabel.BAD, StepLabel.BAD]
    assert metrics["attribution/mixed_groups"] == 1.0 and metrics["attribution/mixed_groups_nondegenerate"] == 1.0
    store.close()


def test_step_population_by_hand_keeps_a_group_whose_trajectories_average_the_same():
    # every trajectory a GOOD call then a BAD early answer, all failed: Eq. 18's trajectory averages are all 0, so
    # the channel is neutralised; over the group's steps (§7.1) μ = 0 and σ = stdev(1, −1, 1, −1) = sqrt(4/3)
    labels, outcomes = [[G, B], [G, B]], [0.0, 0.0]
    assert group_step_advantages(labels, outcomes, [2, 2], alpha=0.1, eps=0.0) == [[0.0, 0.0], [0.0, 0.0]]
    z = 1 / math.sqrt(4 / 3)
    step = group_step_advantages(labels, outcomes, [2, 2], alpha=0.1, eps=0.0, population="step")
    # Eq. 20-21: the call's return-to-go is 0.1·(z − z) = 0, the answer's 0.1·(−z)
    assert step == [pytest.approx([0.0, -0.1 * z]), pytest.approx([0.0, -0.1 * z])]
    # the example of test_eq_18_to_21_by_hand over steps: values 1, −1, 1, −1, −1, 1 → μ = 0, σ = sqrt(6/5)
    adv = group_step_advantages([[G, B, G], [B, B], [G]], [1.0, 0.0, 0.0], [3, 2, 1], 0.1, eps=0.0, population="step")
    s = math.sqrt(6 / 5)
    o = [(1 - 1 / 3) / math.sqrt(1 / 3), (0 - 1 / 3) / math.sqrt(1 / 3)]
    assert adv[0] == pytest.approx([0.1 / s + o[0], 0.0 + o[0], 0.1 / s + o[0]])
    assert adv[1] == pytest.approx([-0.2 / s + o[1], -0.1 / s + o[1]])
    assert adv[2] == pytest.approx([0.1 / s + o[1]])
    # degenerate over steps too: every step GOOD
    assert standardize_attribution([[1.0, 1.0], [1.0]], population="step") == [[0.0, 0.0], [0.0]]


def test_credit_functions_against_hand_computed_values_at_their_defaults():
    """Issue 53: survivors of mutation testing on attributing/credit.py (benchmarks/results/mutation.md), each pinned
    by a hand-computed value: the ±1/0 label rewards, every default (ε, the degenerate σ, the population), the
    degenerate boundary, the ε sign of Eq. 18 and the modes of Eq. 20."""
    import math
    import statistics

    from evolvekit.attributing.credit import (
        attribution_degenerate,
        attribution_rewards,
        fuse,
        group_step_advantages,
        standardize_attribution,
        standardize_outcome,
    )

    G_, B_, N_ = StepLabel.GOOD, StepLabel.BAD, StepLabel.NEUTRAL
    assert attribution_rewards([G_, N_, B_, G_]) == [1.0, 0.0, -1.0, 1.0]

    # trajectory population (the default): averages 0.5 and -1 -> μ = -0.25, σ = stdev([0.5, -1]) = 1.0607
    rewards = [[1.0, 0.0], [-1.0]]
    sigma = statistics.stdev([0.5, -1.0])
    want = [[(1.0 + 0.25) / (sigma + 1e-8), (0.0 + 0.25) / (sigma + 1e-8)], [(-1.0 + 0.25) / (sigma + 1e-8)]]
    assert standardize_attribution(rewards) == want  # exact: the same arithmetic, at the default ε
    step_sigma = statistics.stdev([1.0, 0.0, -1.0])
    assert standardize_attribution(rewards, population="step")[0][0] == 1.0 / (step_sigma + 1e-8)
    assert standardize_attribution(rewards)[0][0] != standardize_attribution(rewards, population="step")[0][0]
    big_eps = standardize_attribution(rewards, eps=0.5)
    assert big_eps[1][0] == pytest.approx(-0.75 / (sigma + 0.5))  # σ + ε, not σ − ε

    # a small but real spread is a signal at the default degenerate σ (1e-6), not noise
    small = [[0.5 + 1e-5], [0.5 - 1e-5]]
    assert not attribution_degenerate(small) and any(v != 0.0 for r in standardize_attribution(small) for v in r)
    # the boundary: σ equal to the threshold is not degenerate (strictly below is)
    exact = statistics.stdev([1.0, 0.0])
    assert not attribution_degenerate([[1.0], [0.0]], degenerate_std=exact)
    assert attribution_degenerate([[1.0], [0.0]], degenerate_std=math.nextafter(exact, math.inf))
    # the default population is the trajectories' averages: each averages 0 (GOOD then BAD), so degenerate
    even = [[1.0, -1.0], [-1.0, 1.0]]
    assert attribution_degenerate(even) and not attribution_degenerate(even, population="step")

    with pytest.raises(ValueError, match="population"):
        standardize_attribution(rewards, population="trajectories")  # type: ignore[arg-type]
    # Eq. 19 at its defaults: (R − μ) / (σ + 1e-8), and a tiny real spread is kept
    s = statistics.stdev([1.0, 0.0])
    assert standardize_outcome([1.0, 0.0]) == [0.5 / (s + 1e-8), -0.5 / (s + 1e-8)]
    assert standardize_outcome([1e-5, 0.0])[0] > 0

    # Eq. 20's modes
    assert fuse([1.0, -1.0], 2.0, 0.5, "both") == [0.5, 1.5]
    assert fuse([1.0, -1.0], 2.0, 0.5, "attribution_only") == [0.5, -0.5]
    assert fuse([1.0, -1.0], 2.0, 0.5, "outcome_only") == [0.0, 2.0]

    # Eq. 18-21 at the defaults (ε, population): a hand-computed group
    adv = group_step_advantages([[G_, B_], [B_]], [1.0, 0.0], [2, 1], alpha=1.0)
    a_sigma = statistics.stdev([0.0, -1.0])
    r = [[(1 + 0.5) / (a_sigma + 1e-8), (-1 + 0.5) / (a_sigma + 1e-8)], [(-1 + 0.5) / (a_sigma + 1e-8)]]
    o = [0.5 / (s + 1e-8), -0.5 / (s + 1e-8)]
    assert adv == [[r[0][0] + r[0][1] + o[0], r[0][1] + o[0]], [r[1][0] + o[1]]]
