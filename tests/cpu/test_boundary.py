"""The information boundary (src/evolvekit/boundary.py): person-written gold never reaches the training side unless
``run.oracle`` lets it through.

The leak test runs the main job's mechanisms (navigating and attributing, grounded sources, the embedded defaults'
switches) on a tiny budget over person-written tasks whose references hold sentinel values
(tests/plugins/ledger_env.py), and looks for the sentinels in every training sample (prompt and target tokens, the
behaviour sequence with its experience too), the experience pool, the stored trajectories and their steps (text and
tokens), step labels and advantages. Then the same run with the oracle switch on (and a cold start on the same
tasks) must show them: the test can fail.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from pathlib import Path

import pytest
import yaml

from evolvekit.attributing.grounded import self_reference
from evolvekit.attributing.stage import grounded_for
from evolvekit.boundary import InformationBoundary
from evolvekit.config import helper_sources, load_config
from evolvekit.engine.base import Engine
from evolvekit.errors import ConfigError
from evolvekit.llm.tiny import make_tiny_model
from evolvekit.navigating.extract import ExperienceExtractor
from evolvekit.orchestrator.build import build_loop
from evolvekit.orchestrator.run_dir import open_run
from evolvekit.types import (
    CallOutcome,
    RewardParts,
    Step,
    StepGrounding,
    StepLabel,
    Task,
    TaskSource,
    ToolCall,
    Trajectory,
)

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")


@pytest.fixture(autouse=True)
def _plugin_path(monkeypatch):
    monkeypatch.syspath_prepend(PLUGINS)


def _task(source: TaskSource, a: float = 2, b: float = 3) -> Task:
    return Task(
        task_id=f"t-{source.value}",
        env_name="ledger",
        query="Add the numbers.",
        reference_solution=[[ToolCall(name="add", arguments={"a": a, "b": b})]],
        source=source,
    )


def _step(i: int, calls: list[ToolCall], g: StepGrounding | None = None, ok: bool = True) -> Step:
    return Step(
        index=i,
        action_text="",
        tool_calls=calls,
        observation="",
        grounding=g,
        calls=[CallOutcome(name=c.name, ok=ok) for c in calls],
    )


def _traj(task_id: str, steps: list[Step], passed: bool, group: str = "g") -> Trajectory:
    return Trajectory(
        task_id=task_id,
        group_id=group,
        steps=steps,
        outcome_reward=float(passed),
        rewards=RewardParts(state_score=float(passed)),
    )


# ---- the boundary's views ------------------------------------------------------------------------------------------


def test_person_written_gold_is_closed_and_synthesized_gold_is_open():
    closed, oracle = InformationBoundary(), InformationBoundary(oracle=True)
    real, synth = _task(TaskSource.REAL), _task(TaskSource.SYNTHETIC)
    assert closed.reference(real) is None and closed.task_view(real).reference_solution is None
    assert closed.reference(synth) == synth.reference_solution  # what the run made itself is fair
    assert oracle.reference(real) == real.reference_solution
    assert closed.task_view(real).query == real.query  # the request stays
    assert not closed.gold_allowed(None)
    g = StepGrounding(state_changed=True, distance_before=2, distance_after=1)
    seen = closed.steps_view(real, [_step(0, [], g)])[0].grounding
    assert seen == StepGrounding(state_changed=True)  # distances to the reference end state are gold
    assert closed.steps_view(synth, [_step(0, [], g)])[0].grounding == g
    assert closed.label == "environment-only" and oracle.label == "oracle"


def test_self_reference_is_the_shortest_passing_episode():
    add = ToolCall(name="add", arguments={"a": 2, "b": 3})
    bad = ToolCall(name="add", arguments={"a": 9, "b": 9})
    long_win = _traj("t", [_step(0, [bad], ok=False), _step(1, [add]), _step(2, [])], True)
    short_win = _traj("t", [_step(0, [add]), _step(1, [])], True)
    loss = _traj("t", [_step(0, [bad]), _step(1, [])], False)
    assert self_reference([loss], 0.5) is None
    assert self_reference([long_win, loss], 0.5) == [[add]]  # the errored call is not part of it
    assert self_reference([long_win, short_win, loss], 0.5) == [[add]]
    two_turns = _traj("t", [_step(0, [add]), _step(1, []), _step(2, [bad]), _step(3, [])], True)
    assert self_reference([two_turns], 0.5) == [[add], [bad]]


def test_grounded_credit_on_a_person_written_task_uses_the_groups_own_success_not_the_gold():
    # the gold says add(2, 3); the group's own success did add(3, 2) (the check accepts it); a failed episode made
    # add(2, 3) and then answered wrongly. Closed gold: the failure's add(2, 3) is not the run's own solution.
    gold = ToolCall(name="add", arguments={"a": 2, "b": 3})
    own = ToolCall(name="add", arguments={"a": 3, "b": 2})
    real = _task(TaskSource.REAL)
    flat = StepGrounding(state_changed=False)  # a stateless backend (BFCL's MathAPI): no distances
    win = _traj("t-real", [_step(0, [own], flat), _step(1, [], flat)], True)
    lose = _traj("t-real", [_step(0, [gold], flat), _step(1, [], flat)], False)
    closed = InformationBoundary()
    ref = self_reference([win, lose], 0.5)
    assert grounded_for(real, lose, 0.5, closed, ref) == [StepLabel.BAD, StepLabel.BAD]
    assert grounded_for(real, win, 0.5, closed, ref) == [StepLabel.GOOD, StepLabel.GOOD]
    # the oracle reads the gold: the failure's add(2, 3) becomes GOOD
    assert grounded_for(real, lose, 0.5, InformationBoundary(oracle=True), ref)[0] == StepLabel.GOOD
    # no success and closed gold: the generic fallback (no verdict on a clean call; the answer by the check)
    assert grounded_for(real, lose, 0.5, closed, None) == [StepLabel.NEUTRAL, StepLabel.BAD]
    assert grounded_for(real, lose, 0.5, closed, None, answer_from_check=False) == [StepLabel.NEUTRAL] * 2


def test_extraction_writes_no_experience_from_person_written_gold():
    from evolvekit.llm.base import SamplingParams

    real = _task(TaskSource.REAL, a=73914.0625, b=51823.125)
    fail = _traj("t-real", [_step(0, [ToolCall(name="add", arguments={"a": 1, "b": 1})]), _step(1, [])], False)

    def extract(boundary: InformationBoundary):
        ex = ExperienceExtractor(Engine(None), SamplingParams(), grounded=True, boundary=boundary)  # type: ignore[arg-type]
        return ex.extract([fail], {real.task_id: real})

    closed = extract(InformationBoundary())
    assert closed.experiences == [] and closed.closed_failures == 1 and closed.calls == 0
    opened = extract(InformationBoundary(oracle=True))
    assert opened.experiences and "73914.0625" in opened.experiences[0].content


def test_config_show_and_helper_sources_name_the_gold():
    assert helper_sources(load_config("configs/quickstart.yaml"))["gold"].startswith("none")
    assert helper_sources(load_config("configs/quickstart.yaml", ["run.oracle=true"]))["gold"] == "oracle"


# ---- the leak test -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _leak_config(tiny, out: Path, oracle: bool, examples: str = "self", questioning: bool = False) -> Path:
    """The main job's mechanisms on person-written tasks, tiny budget (the quickstart itself trains on synthesized
    tasks only; λ = 0 here puts the person-written gold as close to training as any configuration can; with
    ``questioning`` λ = 0.5: self-questioning explores, synthesizes and dedups next to the person-written tasks)."""
    main = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
    data = {
        "run": {"name": "leak", "out_dir": str(out), "seed": 3, "oracle": oracle},
        "env": {"name": "ledger", "plugins": ["ledger_env"], "worked_examples": examples},
        "rollout": {"max_steps": 2, "group_size": 3, "concurrency": 8},
        "train": {
            "iterations": 2,
            "tasks_per_iteration": 2,
            "learning_rate": 1e-3,
            "eval_tasks": 2,
            "eval_k": 1,
            "autocast": "off",
        },
        "navigating": main["navigating"],
        "attributing": main["attributing"],
        "models": {"policy": {"model": str(tiny), "max_new_tokens": 9}},
    }
    if questioning:
        data["questioning"] = {
            "enabled": True,
            "hybrid_lambda": 0.5,
            "synthetic_tasks": 2,
            "explore_runs": 2,
            "explore_steps": 2,
            "reward": "state",
        }
        # scripted explorer and synthesizer (_run_and_collect): a random tiny model executes no call, writes no request
        data["models"].update({role: {"model": f"scripted-{role}"} for role in ("explorer", "synthesizer")})
    if oracle:  # the cold start on person-written references is gold too: only the oracle may run it
        from ledger_env import person_tasks

        tasks = out / "person_tasks.jsonl"
        out.mkdir(parents=True, exist_ok=True)
        tasks.write_text("".join(t.model_dump_json() + "\n" for t in person_tasks("train")))
        data["cold_start"] = {"enabled": True, "tasks_file": str(tasks), "epochs": 1, "batch_size": 2}
    path = out / "cfg.yaml"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def _run_and_collect(
    tiny, out: Path, oracle: bool, monkeypatch, examples: str = "self", questioning: bool = False
) -> dict[str, list[str]]:
    """Run, and return every training-side text: decoded training samples (and SFT samples), the pool, stored
    trajectories and steps (json and decoded tokens), labels and advantages, the stored tasks, and every request
    any role's model was sent (the messages of every chat-templated prompt: policy, explorer, synthesizer)."""
    from transformers import AutoTokenizer

    import evolvekit.train.sft as sft
    from evolvekit.llm.local import LocalLLM
    from evolvekit.train.trainer import GRPOTrainer

    samples: list = []
    requests: list[str] = []
    real_update, real_sft, real_template = GRPOTrainer.update, sft.sft_warmup, LocalLLM.apply_chat_template

    def template(self, messages, add_generation_prompt=True):
        requests.append(json.dumps([m.content for m in messages]))
        return real_template(self, messages, add_generation_prompt)

    monkeypatch.setattr(LocalLLM, "apply_chat_template", template)
    if questioning:  # a random tiny model executes no call and writes no request: scripted explorer and synthesizer,
        # whose conversations are recorded as every other request is
        from evolvekit.env.action_text import format_call
        from evolvekit.llm import factory
        from evolvekit.llm.base import Completion
        from evolvekit.types import ToolCall

        real_role = factory.role_llm
        answers = {
            "explorer": format_call(ToolCall(name="add", arguments={"a": 3, "b": 4})),
            "synthesizer": "Task: Please add the two numbers together.\nSolution: 0\n",
        }

        class _Scripted:
            def __init__(self, role: str) -> None:
                self.name, self.answer = f"scripted-{role}", answers[role]

            def chat(self, conversations, params):
                for conv in conversations:
                    requests.append(json.dumps([m.content for m in conv]))
                return [[Completion(text=self.answer)] for _ in conversations]

        def role_llm(models, role):
            return _Scripted(role) if role in answers else real_role(models, role)

        monkeypatch.setattr(factory, "role_llm", role_llm)

    def update(self, batch):
        samples.extend(batch)
        return real_update(self, batch)

    def warmup(trainer, batch, *args, **kwargs):
        samples.extend(batch)
        return real_sft(trainer, batch, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "update", update)
    monkeypatch.setattr(sft, "sft_warmup", warmup)
    cfg, run_dir, store = open_run(load_config(_leak_config(tiny, out, oracle, examples, questioning)), None)
    build_loop(cfg, run_dir, store, show_progress=False).run()
    tok = AutoTokenizer.from_pretrained(str(tiny))
    found: dict[str, list[str]] = {"samples": [], "experiences": [], "trajectories": [], "steps": [], "labels": []}
    found["requests"] = requests
    found["tasks"] = []
    for s in samples:
        found["samples"].append(tok.decode(s.token_ids))
        if s.behaviour_token_ids:
            found["samples"].append(tok.decode(s.behaviour_token_ids))
        found["labels"].append(json.dumps(s.token_advantages))
    found["experiences"] = [e.model_dump_json() for e in store.experiences()]
    distances: list[str] = []  # stored steps that carry distances to a reference end state (the ledger's)
    for phase in ("train", "eval_before", "eval_after"):
        for t in store.trajectories(None, phase):
            found["trajectories"].append(t.model_dump_json())
            distances += [
                f"{phase}:{s.grounding.distance_before}"
                for s in t.steps
                if s.grounding is not None and s.grounding.distance_before is not None
            ]
            for st in t.steps:
                found["steps"].append(tok.decode(st.prompt_token_ids) + tok.decode(st.completion_token_ids))
            found["labels"].append(json.dumps([str(x) for x in t.step_attributions or []]))
    store.close()
    con = sqlite3.connect(run_dir / "run.sqlite")
    for table in ("trajectories", "steps", "experiences", "metrics", "tasks", "meta"):
        found[table if table in found else "trajectories"] += [
            json.dumps([v for v in row if not isinstance(v, bytes)])  # an embedding vector is no text
            for row in con.execute(f"SELECT * FROM {table}")  # noqa: S608 (fixed table names)
        ]
    con.close()
    assert samples, "the run trained on nothing: the test would prove nothing"
    found["stored distances"] = distances
    return found


def _leaks(found: dict[str, list[str]]) -> dict[str, int]:
    from ledger_env import SENTINEL_PATTERN

    return {k: sum(bool(re.search(SENTINEL_PATTERN, text)) for text in v) for k, v in found.items()}


@pytest.mark.slow
def test_no_person_written_gold_reaches_training_unless_the_oracle_switch_is_on(tiny, tmp_path, monkeypatch):
    found = _run_and_collect(tiny, tmp_path / "closed", False, monkeypatch)
    closed = _leaks(found)
    assert sum(closed.values()) == 0, f"person-written gold reached the training side: {closed}"
    assert found["requests"] and found["tasks"], "nothing was sent or stored: the test would prove nothing"
    # the ledger's steps measure distances to the reference's end: none is kept, in the store or after it
    assert found["stored distances"] == []
    found = _run_and_collect(tiny, tmp_path / "oracle", True, monkeypatch)
    opened = _leaks(found)
    # the switch lets them through: reference-written experiences, and the cold start's targets
    assert opened["experiences"] > 0 and opened["samples"] > 0, opened
    # and the training rollouts' distances; held-out evaluation keeps none either way (it is scored by outcome)
    kept = found["stored distances"]
    assert kept and all(d.startswith("train:") for d in kept), kept
    # the store keeps the references too: the tasks table holds them only under the switch
    assert opened["tasks"] > 0, opened
    # the person-written worked example stays hidden under the oracle switch: it opens gold, not examples
    from ledger_env import EXAMPLE_PATTERN

    assert not any(re.search(EXAMPLE_PATTERN, r) for r in found["requests"])


@pytest.mark.slow
def test_no_person_written_task_instance_reaches_a_run_with_questioning_unless_a_switch_is_on(
    tiny, tmp_path, monkeypatch
):
    """Self-questioning on (λ = 0.5: exploration, synthesis and dedup next to the person-written tasks), the default
    worked examples (the run's own): no sentinel of a reference or of a person's worked example anywhere, requests
    and the tasks table included. Then env.worked_examples: person: the example's sentinels reach every prompt."""
    found = _run_and_collect(tiny, tmp_path / "closed", False, monkeypatch, questioning=True)
    closed = _leaks(found)
    assert sum(closed.values()) == 0, f"a person-written task instance reached the training side: {closed}"
    explored = [r for r in found["requests"] if "Explore" in r]
    assert explored, "self-questioning sent the explorer nothing: the test would prove nothing"
    assert any('"worked_examples"' in row for row in found["trajectories"]), "no worked examples were stored"
    assert any("Please add the two numbers together." in row for row in found["tasks"]), "no task was synthesized"
    shown = _leaks(_run_and_collect(tiny, tmp_path / "person", False, monkeypatch, "person", questioning=True))
    assert shown["requests"] > 0 and shown["samples"] > 0 and shown["steps"] > 0, shown
    # the examples switch opens the examples only: references stay closed (no experience, stored task or distance)
    assert shown["experiences"] == 0 and shown["tasks"] == 0 and shown["stored distances"] == 0, shown


def test_a_cold_start_on_person_written_tasks_needs_the_oracle_switch(tiny, tmp_path):
    path = _leak_config(tiny, tmp_path, oracle=True)
    data = yaml.safe_load(path.read_text())
    data["run"]["oracle"] = False
    path.write_text(yaml.safe_dump(data))
    cfg, run_dir, store = open_run(load_config(path), None)
    with pytest.raises(ConfigError, match="person-written.*run.oracle"):
        build_loop(cfg, run_dir, store, show_progress=False)  # refused when the run is built, before any work
    assert store.evaluation("before") is None and store.completed_iterations() == []
    store.close()


@pytest.mark.slow
def test_no_person_written_gold_reaches_an_evolving_rl_run(tiny, tmp_path, monkeypatch):
    """Evolving-RL's related-task pool holds the person-written training tasks (the environment's check, the reward,
    needs their references); its extractor's and solvers' prompts, its samples and what the run stores carry no
    sentinel of them."""
    path = _leak_config(tiny, tmp_path / "evolving", False)
    data = yaml.safe_load(path.read_text())
    data.pop("navigating", None)
    data.pop("attributing", None)
    data["evolving_rl"] = {"enabled": True, "n_candidates": 2, "k_tasks": 2, "skill_max_tokens": 8}
    path.write_text(yaml.safe_dump(data))
    monkeypatch.setattr(sys.modules[__name__], "_leak_config", lambda *a, **k: path)
    found = _run_and_collect(tiny, tmp_path / "evolving", False, monkeypatch)
    leaks = _leaks(found)
    assert sum(leaks.values()) == 0, f"person-written gold reached an Evolving-RL run: {leaks}"
    assert found["requests"] and found["tasks"]
