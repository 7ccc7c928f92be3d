"""The registered estimators (attributing/estimators.py) and step-credit sources (attributing/sources.py) against
hand-computed values: what each passes on from the config to the plain functions, and the metrics it logs (issue 53:
written from the mutants that survived once mutmut reached the registered functions)."""

from __future__ import annotations

import math

import pytest

from evolvekit.attributing.estimators import dual_channel_advantages, gigpo_step_advantages
from evolvekit.attributing.sources import (
    STEP_CREDIT,
    CreditInputs,
    grounded_source,
    llm_source,
    register_step_credit,
)
from evolvekit.config import AttributingConfig
from evolvekit.train.advantages import AdvantageBatch
from evolvekit.types import Step, StepLabel, Trajectory

G, B, N = StepLabel.GOOD, StepLabel.BAD, StepLabel.NEUTRAL
R2 = math.sqrt(2.0)


def _traj(group: str, outcome: float | None, steps: int = 1, first: int = 0, keys=None, rewards=None) -> Trajectory:
    t = Trajectory(task_id="t", group_id=group, outcome_reward=outcome)
    t.steps = [
        Step(
            index=first + k,
            action_text="a",
            state_key=keys[k] if keys else None,
            reward=rewards[k] if rewards else 0.0,
        )
        for k in range(steps)
    ]
    return t


def _dual(trajs, labels, iteration: int = 0, **acfg) -> tuple[list[dict[int, float]], dict[str, float]]:
    return dual_channel_advantages(AdvantageBatch(trajs, labels, iteration, 1e-6, AttributingConfig(**acfg)))


def test_dual_channel_hand_computed_with_its_alpha_schedule_and_group_counts():
    # group g (mixed, live): T1 GOOD,BAD passes; T2 BAD,BAD fails. Eq. 18 over trajectory averages [0, -1]:
    # mu -0.5, sigma sqrt(0.5), so T1 [2.1213, -0.7071], T2 [-0.7071, -0.7071]; Eq. 19 [+0.7071, -0.7071];
    # alpha 0.5 (the schedule's entry for iteration 1); returns-to-go: T1 [sqrt2, sqrt2/4], T2 [-sqrt2, -3 sqrt2/4]
    g = [_traj("g", 1.0, 2, first=3), _traj("g", 0.0, 2)]
    # group h: both GOOD, both failed: a constant attribution channel, outcomes not mixed
    h = [_traj("h", 0.0), _traj("h", 0.0)]
    # group k: mixed outcomes (the third has none: 0), a constant channel (the third's labels failed: None)
    k = [_traj("k", 1.0), _traj("k", 0.0), _traj("k", None)]
    # group m: mixed and live, one step each: Eq. 18 [+0.7071, -0.7071], Eq. 19 the same: 1.5 x 0.7071 each
    m = [_traj("m", 1.0), _traj("m", 0.0)]
    labels = [[G, B], [B, B], [G], [G], [G], [G], None, [G], [B]]
    adv, metrics = _dual(g + h + k + m, labels, iteration=1, alpha=0.9, alpha_schedule=[0.2, 0.5])
    assert adv[0] == {3: pytest.approx(R2), 4: pytest.approx(R2 / 4)}  # the steps' own indices
    assert adv[1] == {0: pytest.approx(-R2), 1: pytest.approx(-3 * R2 / 4)}
    assert adv[2] == adv[3] == {0: 0.0}
    # k: outcomes [1, 0, 0], mu 1/3, sigma sqrt(1/3): one step each, so the outcome channel alone
    assert adv[4] == {0: pytest.approx(2 / 3 / math.sqrt(1 / 3))}
    assert adv[5] == adv[6] == {0: pytest.approx(-1 / 3 / math.sqrt(1 / 3))}
    assert adv[7] == {0: pytest.approx(1.5 / R2)} and adv[8] == {0: pytest.approx(-1.5 / R2)}
    assert metrics == {
        "attribution/alpha": 0.5,
        "attribution/constant_channel_groups": 2.0,  # h and k
        "attribution/mixed_groups": 3.0,  # g, k and m
        "attribution/mixed_groups_nondegenerate": 2.0,  # g and m
    }


def test_dual_channel_passes_eps_mode_and_the_step_population_on():
    # two trajectories GOOD,BAD: equal trajectory averages (degenerate), but steps [1, -1, 1, -1] are not
    g = [_traj("g", 1.0, 2), _traj("g", 0.0, 2)]
    labels = [[G, B], [G, B]]
    _, by_trajectory = _dual(g, labels, normalization="trajectory")
    adv, by_step = _dual(g, labels, normalization="step", alpha=1.0, eps=1.0)
    assert by_trajectory["attribution/constant_channel_groups"] == 1.0
    assert by_step["attribution/constant_channel_groups"] == 0.0
    # step population: mu 0, sigma sqrt(4/3); with eps 1: r = ±1 / (1.1547 + 1); outcome [+0.7071, -0.7071] / ...
    s = math.sqrt(4 / 3)
    o = 0.5 / (math.sqrt(0.5) + 1.0)  # Eq. 19 with the same eps
    assert adv[0][1] == pytest.approx(-1 / (s + 1) + o) and adv[0][0] == pytest.approx(o)  # +1/(s+1) - 1/(s+1) + o
    assert adv[1][1] == pytest.approx(-1 / (s + 1) - o)
    only_outcome, _ = _dual(g, labels, normalization="step", alpha=1.0, mode="outcome_only")
    assert only_outcome[0] == {0: pytest.approx(1 / R2), 1: pytest.approx(1 / R2)}


def test_gigpo_estimator_hand_computed_with_its_gamma_weight_norm_and_summed_group_counts():
    # group g: T1 keys [s0, a] rewards [0.5, 0] outcome 1; T2 keys [s0, b] rewards [0, 0] outcome 0.
    # mean norm: episode [+0.5, -0.5]; returns (gamma 0.5): T1 [0.5 + 0.5*1, 1] = [1, 1], T2 [0, 0];
    # step group s0 {1, 0} -> [+0.5, -0.5]; a and b alone -> 0; omega 2: T1 [0.5 + 1, 0.5], T2 [-1.5, -0.5]
    g = [
        _traj("g", 1.0, 2, keys=["s0", "a"], rewards=[0.5, 0.0]),
        _traj("g", 0.0, 2, keys=["s0", "b"], rewards=[0.0, 0.0]),
    ]
    # group h: two steps on one anchor and one alone
    h = [_traj("h", 0.0, 2, keys=["x", "x"]), _traj("h", 0.0, 1, keys=["y"])]
    cfg = {"gigpo_gamma": 0.5, "gigpo_weight": 2.0, "gigpo_norm": "mean"}
    adv, metrics = gigpo_step_advantages(AdvantageBatch(g + h, [None] * 4, 0, 1e-6, AttributingConfig(**cfg)))
    assert adv[0] == {0: pytest.approx(1.5), 1: pytest.approx(0.5)}
    assert adv[1] == {0: pytest.approx(-1.5), 1: pytest.approx(-0.5)}
    assert adv[2] == {0: 0.0, 1: 0.0} and adv[3] == {0: 0.0}
    assert metrics == {"gigpo/step_groups": 2.0, "gigpo/grouped_steps": 4.0}  # s0 (2 steps) + x (2 steps)


def test_the_grounded_source_passes_its_labels_on_with_exact_shares():
    trajs = [_traj("g", 1.0, 3), _traj("g", 0.0, 2)]
    grounded = [[G, N, B], [N, G]]  # GOOD, NEUTRAL and BAD in shares that differ: each counts its own label
    res = grounded_source(CreditInputs(trajectories=trajs, tasks={}, grounded=grounded))
    assert res.labels == grounded and res.labels is not grounded
    assert res.metrics == {
        "attribution/good_ratio": pytest.approx(0.4),
        "attribution/neutral_ratio": pytest.approx(0.4),
    }
    empty = grounded_source(CreditInputs(trajectories=[], tasks={}, grounded=[]))
    assert empty.labels == [] and empty.metrics == {"attribution/good_ratio": 0.0, "attribution/neutral_ratio": 0.0}


class _Result:
    labels = [[B], None]

    def metrics(self) -> dict[str, float]:
        return {"attribution/parsed": 0.5}


class _Attributor:
    """A stand-in for the §5.1 attributor: records what it was asked."""

    def __init__(self) -> None:
        self.asked: list = []

    def attribute(self, trajectories, tasks):
        self.asked.append((list(trajectories), tasks))
        return _Result()


def test_the_llm_source_asks_the_attributor_and_has_no_labels_without_one():
    trajs = [_traj("g", 1.0), _traj("g", 0.0)]
    none = llm_source(CreditInputs(trajectories=trajs, tasks={}, grounded=[[G], [G]]))
    assert none.labels == [None, None] and none.metrics == {}
    attributor = _Attributor()
    tasks: dict = {"t": None}
    res = llm_source(CreditInputs(trajectories=trajs, tasks=tasks, grounded=[[G], [G]], attributor=attributor))  # type: ignore[arg-type]
    assert res.labels == [[B], None] and res.metrics == {"attribution/parsed": 0.5}
    assert attributor.asked == [(trajs, tasks)]


def test_register_step_credit_adds_to_the_table_and_names_itself_in_its_refusals():
    def mine(inputs: CreditInputs):
        raise AssertionError("not called")

    try:
        assert register_step_credit("zz_test_source")(mine) is mine
        assert STEP_CREDIT["zz_test_source"] is mine
        with pytest.raises(ValueError, match=r"^step-credit source 'zz_test_source' is already registered$"):
            register_step_credit("zz_test_source")(lambda inputs: None)
    finally:
        STEP_CREDIT.pop("zz_test_source", None)
    for reserved in ("auto", "gigpo"):
        with pytest.raises(ValueError, match=rf"^'{reserved}' is reserved, not a step-credit source$"):
            register_step_credit(reserved)(mine)
        assert reserved not in STEP_CREDIT
