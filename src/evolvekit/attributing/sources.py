"""Step-credit sources, registered by name (the labels side of self-attributing; estimators are the other side,
train/advantages.py).

A source is one function ``(CreditInputs) -> CreditResult``: GOOD/BAD/NEUTRAL labels for every step of the
iteration's live trajectories (None for a trajectory it could not label), and its metrics. The configured
advantage estimator (``dual_channel``: Eq. 18-21) turns the labels into step advantages. A new source is one
function, one ``@register_step_credit("name")`` and one config value (``attributing.source: name``); a module that
registers one is imported through ``env.plugins``.

Every source receives the grounded labels too (``CreditInputs.grounded``: execution against the reference the
information boundary lets the run read, or a self-derived one; attributing/grounded.py), so that a source other
than ``grounded`` is scored against them (``attribution/agreement_with_grounded``).

Built in:
- ``grounded``: those labels themselves (no helper model);
- ``llm``: the paper's attributor (§5.1), through the run's attributor model.

``gigpo`` is not a source: GiGPO needs no step labels (its anchor-state groups are the estimator,
attributing/gigpo.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from evolvekit.attributing.attributor import StepAttributor
from evolvekit.registry import registrar
from evolvekit.types import StepLabel, Task, Trajectory


@dataclass(frozen=True)
class CreditInputs:
    """What every source receives: the live trajectories, the tasks as the information boundary shows them (a
    person-written task's gold removed unless ``run.oracle``), their grounded labels, and the run's attributor
    (None when none was built)."""

    trajectories: Sequence[Trajectory]
    tasks: dict[str, Task]
    grounded: Sequence[list[StepLabel]]
    attributor: StepAttributor | None = None


@dataclass
class CreditResult:
    labels: list[list[StepLabel] | None]
    metrics: dict[str, float] = field(default_factory=dict)


CreditFn = Callable[[CreditInputs], CreditResult]

STEP_CREDIT: dict[str, CreditFn] = {}


def register_step_credit(name: str) -> Callable[[CreditFn], CreditFn]:
    """Register a step-credit source under ``name`` (a second registration of a name, or ``auto``/``gigpo``, the
    other values of ``attributing.source``, is refused)."""
    return registrar(STEP_CREDIT, "step-credit source", name, reserved=("auto", "gigpo"))


@register_step_credit("grounded")
def grounded_source(inputs: CreditInputs) -> CreditResult:
    """The grounded labels (attributing/grounded.py), with the share of GOOD and of NEUTRAL steps."""
    flat = [lab for labs in inputs.grounded for lab in labs]
    n = len(flat)
    return CreditResult(
        labels=list(inputs.grounded),
        metrics={
            "attribution/good_ratio": sum(lab == StepLabel.GOOD for lab in flat) / n if flat else 0.0,
            "attribution/neutral_ratio": sum(lab == StepLabel.NEUTRAL for lab in flat) / n if flat else 0.0,
        },
    )


@register_step_credit("llm")
def llm_source(inputs: CreditInputs) -> CreditResult:
    """The paper's attributor (§5.1): one call per trajectory with the task, the trajectory and the outcome."""
    if inputs.attributor is None:
        return CreditResult(labels=[None] * len(inputs.trajectories))
    result = inputs.attributor.attribute(inputs.trajectories, inputs.tasks)
    return CreditResult(labels=result.labels, metrics=result.metrics())
