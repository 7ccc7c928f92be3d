"""Hand-made mutants for what mutmut cannot reach (issue 77.2): module constants, import-time tables and the
paper's values written as config defaults. Each mutant is one textual change to one file of a fresh copy of the
committed tree (benchmarks/audits/mutation.py: copy_checkout); the named fast tests then run on that copy, and a
mutant that every test passes survived.

    nice .venv/bin/python benchmarks/audits/hand_mutants.py > runs/hand_mutants.log 2>&1 &

Writes benchmarks/results/hand_mutants.md. Run it alone on the machine, never in CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import ROOT, copy_checkout  # noqa: E402


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # under src/evolvekit
    old: str
    new: str
    tests: tuple[str, ...]


_ESTIMATOR_TESTS = (
    "tests/cpu/test_estimators.py",
    "tests/cpu/test_advantages.py",
    "tests/cpu/test_gigpo.py",
    "tests/cpu/test_attributing.py",
    "tests/cpu/test_attributing_stage.py",
)

MUTANTS = (
    # CoEvolve §3.1: a task is failing below the success threshold 0.5
    Mutant("coevolve threshold", "questioning/coevolve.py", "THRESHOLD = 0.5", "THRESHOLD = 0.6",
           ("tests/cpu/test_coevolve.py",)),
    # CoEvolve's re-exploration goals (Appendix prompts), an import-time table
    Mutant("coevolve forgetting goal", "questioning/coevolve.py",
           '"2. Create variations with different parameters\\n', '"2. Create variations\\n',
           ("tests/cpu/test_coevolve.py",)),
    # EvolveR's principle types in search_experience's answer: a failure is cautionary
    Mutant("search answer principle type", "navigating/tool_env.py", 'PRINCIPLE_TYPE = {"failure": "cautionary"}',
           "PRINCIPLE_TYPE = {}", ("tests/cpu/test_navigating.py",)),
    # the attributor's prompt cut for long observations
    Mutant("attributor field cut", "attributing/prompts.py", "MAX_FIELD_CHARS = 1500", "MAX_FIELD_CHARS = 150000",
           ("tests/cpu/test_attributor.py", "tests/cpu/test_attributing.py")),
    # an experience import's bounds (hostile input)
    Mutant("experience import cap", "navigating/pool.py", "MAX_IMPORT_EXPERIENCES = 10_000",
           "MAX_IMPORT_EXPERIENCES = 10_000_000", ("tests/cpu/test_pool.py", "tests/cpu/test_hostile_cli.py")),
    # curation's number pattern: a negative or decimal value stated in a request
    Mutant("curation number pattern", "questioning/curate.py", r'NUMBER = re.compile(r"-?\d+(?:\.\d+)?")',
           r'NUMBER = re.compile(r"\d+")', ("tests/cpu/test_curate.py",)),
    # grounded credit's number pattern
    Mutant("grounded number pattern", "attributing/grounded.py", r'_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*")',
           r'_NUMBER = re.compile(r"\d+")', ("tests/cpu/test_grounded.py",)),
    # the paper's values as defaults: η = 0.5 (§7.1.3), α = 0.1 (§7.5)
    Mutant("default eta", "config.py", 'eta: float = F(0.5,', 'eta: float = F(0.4,', ("tests/cpu/test_config.py",)),
    Mutant("default alpha", "config.py", 'alpha: float = F(0.1,', 'alpha: float = F(0.2,',
           ("tests/cpu/test_config.py",)),
    # the table config show flags departures against: the paper's η
    Mutant("paper table eta", "config.py", '"navigating.eta": (0.5, "§7.1.3")', '"navigating.eta": (0.4, "§7.1.3")',
           ("tests/cpu/test_config.py",)),
    # the registered estimators' and step-credit sources' bodies (decorated: outside mutmut's reach)
    Mutant("dual channel alpha schedule", "attributing/estimators.py", "alpha = alpha_for(acfg, batch.iteration)",
           "alpha = acfg.alpha", _ESTIMATOR_TESTS),
    Mutant("dual channel mixed groups", "attributing/estimators.py",
           "if len({live[i].checked_outcome for i in idx}) > 1:",
           "if len({live[i].checked_outcome for i in idx}) >= 1:", _ESTIMATOR_TESTS),
    Mutant("dual channel mode", "attributing/estimators.py", "            acfg.mode,\n            acfg.eps,",
           '            "outcome_only",\n            acfg.eps,', _ESTIMATOR_TESTS),
    Mutant("gigpo gamma and weight", "attributing/estimators.py", "acfg.gigpo_gamma,\n            acfg.gigpo_weight,",
           "acfg.gigpo_weight,\n            acfg.gigpo_gamma,", _ESTIMATOR_TESTS),
    Mutant("grpo eps", "train/advantages.py", "return grpo_step_advantages(batch.trajectories, batch.eps_norm), {}",
           "return grpo_step_advantages(batch.trajectories, 1.0), {}", _ESTIMATOR_TESTS),
    Mutant("grounded source neutral ratio", "attributing/sources.py",
           '"attribution/neutral_ratio": sum(lab == StepLabel.NEUTRAL',
           '"attribution/neutral_ratio": sum(lab == StepLabel.BAD', _ESTIMATOR_TESTS),
    Mutant("llm source registration", "attributing/sources.py", '@register_step_credit("llm")',
           '@register_step_credit("llm_judge")', _ESTIMATOR_TESTS),
    Mutant("gigpo registration", "attributing/estimators.py", '@register_advantage("gigpo")',
           '@register_advantage("gigpo2")', _ESTIMATOR_TESTS),
    # the engine registry's built-in backends, registered at import
    Mutant("built-in engines", "engine/registry.py", "for _module in (native, continuous, vllm, sglang):",
           "for _module in (native, continuous, vllm):", ("tests/cpu/test_engine_registry.py",)),
)  # fmt: skip


def run(mutant: Mutant, copy: Path, pytest_args: tuple[str, ...] = ("-x", "-m", "not slow")) -> tuple[str, float]:
    """``mutant`` applied to ``copy``, its tests run there (``pytest_args`` before them), the file put back: the
    verdict (the failed tests, or SURVIVED) and the seconds the tests took."""
    target = copy / "src" / "evolvekit" / mutant.path
    original = target.read_text()
    if original.count(mutant.old) != 1:
        return f"not applied: the text occurs {original.count(mutant.old)} times", 0.0
    target.write_text(original.replace(mutant.old, mutant.new))
    t0 = time.perf_counter()
    try:
        res = subprocess.run(
            [str(copy / ".venv/bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args,
             *mutant.tests],
            cwd=copy, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(copy / "src")},
        )  # fmt: skip
    finally:
        target.write_text(original)
    failed = [
        line.removeprefix("FAILED ").split(" - ")[0] for line in res.stdout.splitlines() if line.startswith("FAILED")
    ]
    verdict = f"killed by {', '.join(failed)}" if res.returncode else "SURVIVED"
    return verdict, time.perf_counter() - t0


def main() -> None:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    copy = ROOT / "runs" / "hand_mutants"
    copy_checkout(copy)
    rows = []
    for m in MUTANTS:
        verdict, seconds = run(m, copy)
        print(f"{m.name}: {verdict} ({seconds:.0f} s)", flush=True)
        rows.append(f"| {m.name} | `{m.path}` | `{m.old}` → `{m.new}` | {verdict} |")
    killed = sum("killed" in r for r in rows)
    out = ROOT / "benchmarks" / "results" / "hand_mutants.md"
    out.write_text(
        f"$ nice .venv/bin/python benchmarks/audits/hand_mutants.py   # code: commit {commit.stdout.strip()}\n\n"
        "# Hand-made mutants (issue 77.2): what mutmut cannot reach\n\n"
        f"`nice .venv/bin/python benchmarks/audits/hand_mutants.py` at {commit.stdout.strip()}: **{killed} of "
        f"{len(rows)} killed**. Each mutant is one change to a fresh copy of the committed tree; the named fast tests "
        "(`-m 'not slow'`) run on it.\n\n| mutant | file | change | verdict |\n|---|---|---|---|\n"
        + "\n".join(rows) + "\n"
    )  # fmt: skip
    print(f"{out}: {killed} of {len(rows)} killed")


if __name__ == "__main__":
    main()
