"""Self-questioning's pipeline (questioning/pipeline.py) around its parts, with no model: the rounds of
exploration, synthesis and curation, CoEvolve's re-exploration, the pass filter, the wording mask (issue 77.2).

The explorer, the synthesizer and curation are recording doubles put in with monkeypatch, so each test sees what the
pipeline hands each part and what it counts in the funnel.
"""

import logging
from dataclasses import replace
from types import SimpleNamespace

import pytest
from episode_doubles import logged

from evolvekit.config import Config, EnvConfig
from evolvekit.env.action_text import format_call
from evolvekit.env.base import ToolSchema
from evolvekit.errors import ConfigError
from evolvekit.llm.base import SamplingParams
from evolvekit.questioning import pipeline
from evolvekit.questioning.pipeline import (
    Funnel,
    HeldoutWordings,
    SynthesisSettings,
    known_tasks,
    learnable,
    wording,
)
from evolvekit.questioning.synthesize import SynthesisReport, chain_shots, follow_up_shots, shots_from_examples
from evolvekit.types import ChatMessage, Task, ToolCall


def test_wording_masks_numbers_case_and_punctuation_and_joins_turns():
    assert wording("What is 57 plus 7?") == wording("what is 3.5 PLUS -2,000!") == "what is # plus #"
    assert wording(["Add 1 and 2.", "Then divide by 3"]) == "add # and # then divide by #"
    assert wording("abc") == "abc"


def test_known_tasks_are_the_train_tasks_and_the_synthetic_held_out_file(tmp_path):
    train = [Task(task_id="t", env_name="bfcl", query="q")]
    held = tmp_path / "held.jsonl"
    held.write_text(Task(task_id="h", env_name="bfcl", query="h").model_dump_json() + "\n")
    assert [t.task_id for t in known_tasks(EnvConfig(), str(held), train)] == ["t", "h"]
    served = EnvConfig(name="mcp")  # an MCP server without a tasks file has no tasks of its own: none are read
    assert known_tasks(served) == []
    held.write_text("not json\n")
    with pytest.raises(ConfigError, match=r"held\.jsonl:1: not a task: "):
        known_tasks(EnvConfig(), str(held), train)


def _tasks(n):
    return [Task(task_id=f"t{i}", env_name="bfcl", query=f"q{i}", metadata={"curation": {"dedup": "passed"}})
            for i in range(n)]  # fmt: skip


def test_a_task_with_no_curation_record_gets_one_for_its_rewards():
    [task] = learnable([Task(task_id="t", env_name="bfcl", query="q")], lambda ts: [[1.0, 0.0]], Funnel())
    assert task.metadata["curation"] == {"policy_rewards": [1.0, 0.0]}


class _Served:
    """A served model: chat only, so its decoding cannot be constrained."""

    name = "served-7b"


class _InProcess(_Served):
    def apply_chat_template(self, messages, add_generation_prompt=True):
        return []

    def decode_batch(self, params, keep_rows=False):
        return None


def test_the_scaffold_follows_its_mode_and_warns_once_per_role_for_a_served_model(monkeypatch, caplog):
    monkeypatch.setattr(pipeline, "_UNSCAFFOLDED", set())
    assert pipeline.scaffold_on("on", _Served()) and not pipeline.scaffold_on("off", _InProcess())
    with caplog.at_level(logging.WARNING, logger="evolvekit.questioning.pipeline"):
        assert pipeline.scaffold_on("auto", _InProcess()) and not logged(caplog, "evolvekit.questioning.pipeline")
        assert not pipeline.scaffold_on("auto", _Served())
        assert not pipeline.scaffold_on("auto", _Served(), "explorer")  # said once for the role
        assert not pipeline.scaffold_on("auto", _Served(), "synthesizer")
        assert not pipeline.scaffold_on("off", _Served(), "extractor")  # turned off: nothing to say
    assert logged(caplog, "evolvekit.questioning.pipeline") == [
        f"questioning.scaffold: the {role} (served-7b) is served, so its output cannot be constrained: it runs "
        "without the decoding scaffold; a small served model may then make no tool call or write no task (an "
        f"in-process models.{role} keeps it)"
        for role in ("explorer", "synthesizer")
    ]
    monkeypatch.setattr(pipeline, "_UNSCAFFOLDED", set())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="evolvekit.questioning.pipeline"):
        pipeline.scaffold_on("auto", SimpleNamespace())  # a backend with no name
    assert "the explorer (?) is served" in logged(caplog, "evolvekit.questioning.pipeline")[0]


def test_the_pass_filter_keeps_mixed_outcomes_records_them_and_counts_the_rest(caplog):
    funnel = Funnel(unlearnable=2)
    tasks = _tasks(3)
    with caplog.at_level(logging.INFO, logger="evolvekit.questioning.pipeline"):
        kept = learnable(tasks, lambda ts: [[1.0, 0.0], [0.12345, 0.12345], [0.0, 0.33333]], funnel)
    assert [t.task_id for t in kept] == ["t0", "t2"] and funnel.unlearnable == 3
    assert kept[1].metadata["curation"] == {"dedup": "passed", "policy_rewards": [0.0, 0.333]}
    assert logged(caplog, "evolvekit.questioning.pipeline") == [
        "synthesized task dropped by the pass filter (rewards [0.12345, 0.12345], not mixed): 'q1'"
    ]
    with pytest.raises(ValueError):  # a probe that answers for fewer tasks than asked is a bug, not a drop
        learnable(_tasks(2), lambda ts: [[1.0, 0.0]], Funnel())
    assert learnable([], lambda ts: pytest.fail("probed nothing"), Funnel()) == []


# -- the rounds, with recording doubles ---------------------------------------------------------------------------


def _trace(calls):
    return SimpleNamespace(successful_calls=lambda: [None] * calls)


class _Explorer:
    def __init__(self):
        self.rounds, self.calls = [], []

    def start_round(self, offset):
        self.rounds.append(offset)

    def explore(self, make_env, sandbox, runs, steps, goal=None):
        self.calls.append((make_env, sandbox, runs, steps, goal))
        return [_trace(2), _trace(1)]


class _Synth:
    def __init__(self):
        self.rounds, self.calls, self.made = [], [], 0
        self.writer = None  # the documented requests: no back-translation round trip

    def start_round(self, offset):
        self.rounds.append(offset)

    def synthesize(self, traces, env_name, meta):
        self.calls.append((traces, env_name, meta))
        self.made += 1
        return SynthesisReport(tasks=[Task(task_id=f"s{self.made}", env_name=env_name, query="q")], unparseable=1,
                               unchained=2)  # fmt: skip


@pytest.fixture
def parts(monkeypatch):
    """The pipeline's parts replaced by doubles that record what they are given."""
    seen = SimpleNamespace(explorer=_Explorer(), synth=_Synth(), built=[], checks=[], dedup=[], curated=[])

    def explorer_and_synthesizer(*args):
        seen.built.append(args)
        return seen.explorer, seen.synth

    def curation_checks(q, make_env, sandbox, embed=None):
        seen.checks.append((q, make_env, sandbox, embed))
        return pipeline.CurationChecks(agreement="agreement")

    class _Dedup:
        def __init__(self, *args):
            seen.dedup.append(args)
            self.embed = "embed"

        def seed(self, tasks):
            pass

    def curate_new(tasks, dedup, make_env, funnel, checks=None):
        seen.curated.append((list(tasks), dedup, make_env, funnel, checks))
        return []  # nothing kept: every round runs

    monkeypatch.setattr(pipeline, "explorer_and_synthesizer", explorer_and_synthesizer)
    monkeypatch.setattr(pipeline, "curation_checks", curation_checks)
    monkeypatch.setattr(pipeline, "Deduplicator", _Dedup)
    monkeypatch.setattr(pipeline, "curate_new", curate_new)
    return seen


def _env():
    raise AssertionError("the doubles make no environment")


def test_the_rounds_hand_each_part_its_settings_and_add_up_the_funnel(parts):
    cfg = Config()
    settings = SynthesisSettings.of(cfg)
    q = cfg.questioning
    kept, funnel, traces = pipeline.synthesize_tasks(
        settings, 3, "explorer-llm", "xp", "synth-llm", "sp", _env, embed="embed", funnel=Funnel(explored=4)
    )
    assert kept == [] and len(traces) == 10  # every round's traces, five rounds by default
    assert parts.explorer.rounds == parts.synth.rounds == [pipeline._ROUND_STRIDE * n for n in (4, 6, 8, 10, 12)]
    sandbox = pipeline.sandbox_for(cfg.env)
    assert parts.checks == [(q, _env, sandbox, "embed")]
    assert parts.built == [(settings, "explorer-llm", "xp", "synth-llm", "sp", _env, sandbox, "agreement")]
    assert parts.dedup == [("embed", q.lexical_dedup_threshold, q.semantic_dedup_threshold)]
    assert parts.explorer.calls[0] == (_env, sandbox, q.explore_runs, q.explore_steps, None)
    assert [c[1:] for c in parts.synth.calls] == [("bfcl", pipeline.synthetic_metadata(sandbox))] * 5
    assert (funnel.explored, funnel.explored_calls, funnel.synthesized) == (14, 15, 5)
    assert (funnel.synthesis_unparseable, funnel.unchained) == (5, 10)
    [tasks, _, make_env, funnel_seen, checks] = parts.curated[0]
    assert [t.metadata["bfcl_id"] for t in tasks] == ["s1"] and make_env is _env and funnel_seen is funnel
    assert checks.agreement == "agreement"


def test_back_translated_rounds_round_trip_what_curation_kept_and_add_the_request_counts(parts, monkeypatch):
    """With a writer (questioning.requests.mode: backtranslate), each round's curated tasks go through the round trip
    with the run's trip and environment, and the round's text-filter counts reach the funnel; without one, neither."""
    parts.synth.writer = "a writer"
    found = pipeline.RequestFunnel(calls=2, candidates=24, unparseable=1, values=10, identifiers=2, duplicates=3)
    parts.synth.synthesize = lambda traces, env_name, meta: SynthesisReport(
        tasks=[Task(task_id="s", env_name=env_name, query="q")], unparseable=1, requests=found
    )
    kept_by_curation = [Task(task_id="c", env_name="bfcl", query="c")]
    monkeypatch.setattr(pipeline, "curate_new", lambda *a, **k: list(kept_by_curation))
    tripped = []

    def round_tripped(tasks, trip, make_env, funnel):
        tripped.append((tasks, trip, make_env))
        return tasks

    monkeypatch.setattr(pipeline, "round_tripped", round_tripped)
    settings = SynthesisSettings.of(Config())
    kept, funnel, _ = pipeline.synthesize_tasks(settings, 1, "xl", "xp", "sl", "sp", _env, trip="the trip")
    assert kept == kept_by_curation and tripped == [(kept_by_curation, "the trip", _env)]
    assert (funnel.request_windows, funnel.request_candidates, funnel.request_unparseable) == (2, 24, 1)
    assert (funnel.request_values, funnel.request_identifiers, funnel.request_duplicates) == (10, 2, 3)
    assert funnel.request_none == 1
    parts.synth.writer = None
    tripped.clear()
    pipeline.synthesize_tasks(settings, 1, "xl", "xp", "sl", "sp", _env, trip="the trip")
    assert tripped == []


def test_coevolves_reexploration_explores_toward_its_goal_and_curates_like_any_round(parts):
    cfg = Config()
    settings = SynthesisSettings.of(cfg)
    funnel = Funnel(explored=2, synthesized=1, unchained=1)
    dedup = pipeline.Deduplicator()
    again = pipeline.goal_explorer(settings, 3, 7, "xl", "xp", "sl", "sp", _env, dedup, funnel, keep_positive=True)
    sandbox = pipeline.sandbox_for(cfg.env)
    assert parts.checks == [(cfg.questioning, _env, sandbox, "embed")]
    assert parts.built == [(settings, "xl", "xp", "sl", "sp", _env, sandbox, "agreement")]
    assert again("failure", "a goal") == [] and again("novelty", "another") == []
    assert [c[2:] for c in parts.explorer.calls] == [(3, 7, "a goal"), (3, 7, "another")]
    assert parts.explorer.calls[0][:2] == (_env, sandbox)
    assert parts.explorer.rounds == [pipeline._ROUND_STRIDE * 2, pipeline._ROUND_STRIDE * 4]
    assert len(again.traces) == 4 and (funnel.explored, funnel.synthesized, funnel.unchained) == (6, 3, 5)
    assert [c[1:] for c in parts.synth.calls] == [("bfcl", pipeline.synthetic_metadata(sandbox))] * 2
    [tasks, dedup_seen, make_env, funnel_seen, checks] = parts.curated[0]
    assert [t.metadata["bfcl_id"] for t in tasks] == ["s1"] and dedup_seen is dedup and make_env is _env
    assert funnel_seen is funnel and checks.keep_positive is True and checks.agreement == "agreement"
    off = pipeline.goal_explorer(settings, 1, 1, "xl", "xp", "sl", "sp", _env, dedup, Funnel())
    off("failure", "g")
    assert parts.curated[-1][4].keep_positive is False  # the paper's default: a failed replay is dropped


def test_a_synthesized_task_worded_like_a_held_out_one_is_dropped_and_counted_in_every_path(parts):
    settings = replace(SynthesisSettings.of(Config()), heldout=HeldoutWordings(split=frozenset({"q"})))
    funnel = Funnel()
    pipeline.goal_explorer(settings, 1, 1, "xl", "xp", "sl", "sp", _env, pipeline.Deduplicator(), funnel)("f", "g")
    assert parts.curated[-1][0] == [] and funnel.heldout_split_wording == 1
    _, funnel, _ = pipeline.synthesize_tasks(settings, 1, "xl", "xp", "sl", "sp", _env, max_rounds=2)
    assert parts.curated[-1][0] == [] and funnel.heldout_split_wording == 2


ADD_TOOL = ToolSchema(name="add", description="Add two numbers.")


def test_the_explorer_and_synthesizer_get_the_sections_settings_and_the_environments_own_examples(monkeypatch):
    made = []
    monkeypatch.setattr(pipeline, "seam", lambda llm: ("engine of", llm))
    monkeypatch.setattr(pipeline, "Explorer", lambda *a, **k: made.append(("explorer", a, k)) or "explorer")
    monkeypatch.setattr(pipeline, "TaskSynthesizer", lambda *a, **k: made.append(("synth", a, k)) or "synth")
    monkeypatch.setattr(pipeline, "_UNSCAFFOLDED", set())
    add = format_call(ToolCall(name="add", arguments={"a": 1, "b": 2}))
    examples = [ChatMessage(role="user", content="Add 1 and 2."), ChatMessage(role="assistant", content=add),
                ChatMessage(role="user", content='Tool results:\n[add] {"result": 3}')]  # fmt: skip
    resets = []

    class _Env:
        def reset(self, task, sandbox):
            resets.append((task, sandbox))
            return SimpleNamespace(examples=examples, tools=[ADD_TOOL])

        def close(self):
            resets.append("closed")

    cfg = Config()
    q = cfg.questioning.model_copy(
        update={
            "n_breadth": 2,
            "n_depth": 5,
            "explore_state": True,
            "style_rubrics": ["terse"],
            "request_candidates": 3,
        }
    )
    env = cfg.env.model_copy(update={"tool_rendering": "json"})
    settings = SynthesisSettings(questioning=q, env=env, numbers_constrained=True)
    served = pipeline.explorer_and_synthesizer(settings, _Served(), "xp", _Served(), "sp", _env, {"s": 1}, "agr")
    assert served == ("explorer", "synth") and resets == []  # not targeted, one turn, not chained: no examples read
    [(_, xa, xk), (_, sa, sk)] = made
    assert xa == (("engine of", xa[0][1]), "xp", 2, 5, "json") and xk == {"scaffold": False, "show_start": True}
    assert sa[1:] == ("sp", q.difficulty, ["terse"])
    assert sk == {"targeted": False, "shots": [], "follow_shots": [], "chain_shots": [], "candidates": 3,
                  "agreement": "agr", "numbers_constrained": True, "writer": None, "tools": [],
                  "shots_examples": ()}  # fmt: skip
    for update, llm in (({"turns": 2}, _Served()), ({"chained": True}, _Served()), ({}, _InProcess())):
        made.clear()
        resets.clear()
        q2 = q.model_copy(update={"difficulty": q.difficulty.model_copy(update=update)})
        pipeline.explorer_and_synthesizer(
            replace(settings, questioning=q2), _Served(), "xp", llm, SamplingParams(seed=2), _Env, {"s": 1}
        )
        assert resets == [(None, {"s": 1}), "closed"], update
        sk = made[1][2]
        assert sk["targeted"] is isinstance(llm, _InProcess)
        assert (sk["shots"], sk["follow_shots"], sk["chain_shots"]) == (
            shots_from_examples(examples),
            follow_up_shots(examples),
            chain_shots(examples),
        )
        assert sk["shots"]  # the example became a shot
        # back-translation (the default) for single-turn targeted synthesis only: the writer over the synthesizer's
        # engine, the sandbox's tools and the examples its bootstrap reads
        backtranslating = isinstance(llm, _InProcess) and not update
        assert (sk["writer"] is not None) is backtranslating
        assert sk["tools"] == [ADD_TOOL] and sk["shots_examples"] == (examples if backtranslating else ())
        if backtranslating:
            writer, filters = sk["writer"]
            assert writer.engine == ("engine of", llm) and writer.per_framing == q.requests.per_framing
            assert filters == pipeline.RequestFilters(True, True, 0.8, True, q.requests.shortlist)


def test_tool_agreement_without_an_embedding_model_is_refused_by_name():
    q = Config().questioning.model_copy(update={"tool_agreement": True})
    with pytest.raises(
        ValueError, match=r"^questioning\.tool_agreement needs an embedding model \(embedding\.model\)$"
    ):
        pipeline.curation_checks(q, _env, {}, embed=None)


def test_curation_checks_dedups_replays_and_counts_each_drop_with_its_reason(monkeypatch, caplog):
    def task(tid, query):
        return Task(task_id=tid, env_name="bfcl", query=query)

    tasks = [task("ungrounded", "u"), task("disagrees", "d"), task("dup", "x"), task("trivial", "t"),
             task("infeasible", "i"), task("kept", "k"), task("positive", "p")]  # fmt: skip
    asked = []
    monkeypatch.setattr(pipeline, "grounding", lambda t: 0.2 if t.task_id == "ungrounded" else 0.90049)
    monkeypatch.setattr(pipeline, "numbers_exact", lambda t: True)

    def replay(t, make_env, keep_positive=False):
        asked.append(("replay", t.task_id, make_env, keep_positive))
        return (t.task_id != "infeasible", {"positive": "positive reward"}.get(t.task_id, ""))

    def without_acting(t, make_env):
        asked.append(("trivial?", t.task_id, make_env))
        return t.task_id == "trivial"

    monkeypatch.setattr(pipeline, "replay_feasible", replay)
    monkeypatch.setattr(pipeline, "passes_without_acting", without_acting)

    class _Dedup:
        def filter(self, ts):
            return SimpleNamespace(kept=[t for t in ts if t.task_id != "dup"], lexical_duplicates=1,
                                   semantic_duplicates=2)  # fmt: skip

    agreement = SimpleNamespace(agrees=lambda t: t.task_id != "disagrees")
    checks = pipeline.CurationChecks(min_grounding=0.5, exact_numbers=True, agreement=agreement, keep_positive=True)
    funnel = Funnel(ungrounded=10, tool_disagreement=10, deduplicated=10, trivial=10, infeasible=10, kept=10)
    with caplog.at_level(logging.INFO, logger="evolvekit.questioning.pipeline"):
        kept = pipeline.curate_new(tasks, _Dedup(), _env, funnel, checks)
    assert [t.task_id for t in kept] == ["kept", "positive"]
    assert (funnel.ungrounded, funnel.tool_disagreement, funnel.deduplicated) == (11, 11, 13)
    assert (funnel.trivial, funnel.infeasible, funnel.kept) == (11, 11, 12)
    assert kept[0].metadata["curation"] == {
        "dedup": "passed", "feasibility": "replayed", "grounding": 0.9, "numbers": "exact", "tools": "agree"
    }  # fmt: skip
    assert kept[1].metadata["curation"]["feasibility"] == "positive reward"
    assert ("replay", "kept", _env, True) in asked and ("trivial?", "kept", _env) in asked
    assert logged(caplog, "evolvekit.questioning.pipeline") == [
        "synthesized task dropped: its request does not state its reference's values (grounding): 'u'",
        "synthesized task dropped: its request asks for other tools than its reference calls: 'd'",
        "synthesized task dropped: a duplicate of a known or earlier task: 'x'",
        "synthesized task dropped: the check passes it with no call (nothing to learn): 't'",
        "synthesized task dropped: its reference does not pass on a fresh sandbox (): 'i'",
    ]
    plain = pipeline.curate_new([task("kept", "k")], _Dedup(), _env, Funnel())  # the defaults: no request check
    assert plain[0].metadata["curation"] == {"dedup": "passed", "feasibility": "replayed"}


def test_heldout_wordings_read_each_panel_file_and_refuse_a_line_that_is_not_a_task(tmp_path):
    panel = tmp_path / "panel.jsonl"
    panel.write_text(
        Task(task_id="p1", env_name="bfcl", query="Kindly add 4 to 9.").model_dump_json()
        + "\n\n"
        + Task(task_id="p2", env_name="bfcl", query="Halve 12, please.").model_dump_json()
        + "\n"
    )
    quiet = {"eval_before": False, "eval_after": False, "eval_every": 0}  # not evaluating: no split is read
    cfg = Config().model_copy(
        update={"train": Config().train.model_copy(update={**quiet, "eval_panels": [str(panel)]})}
    )
    held = HeldoutWordings.of(cfg)
    assert held.split == frozenset() and held.panels == {"kindly add # to #", "halve # please"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "x"}\n')
    cfg.train.eval_panels = [str(bad)]
    with pytest.raises(ConfigError, match=r"bad\.jsonl:1: not a task: "):
        HeldoutWordings.of(cfg)


def test_plain_bfcls_sandbox_is_the_families_drawn_state_of_the_configured_backends():
    from evolvekit.env.bfcl.families import get_family

    tree = get_family("fs_chain").sandbox_state()["GorillaFileSystem"]  # the generator's draw, no person's task
    files = pipeline.sandbox_for(EnvConfig(name="bfcl", backends=["GorillaFileSystem", "MessageAPI"]))
    assert files == {"classes": ["GorillaFileSystem", "MessageAPI"], "initial_config": {"GorillaFileSystem": tree}}
    assert pipeline.sandbox_for(EnvConfig(name="bfcl", backends=["MathAPI"])) == {
        "classes": ["MathAPI"],
        "initial_config": {},
    }


def test_synthesis_settings_gather_the_resolved_number_constraint_the_synthetic_file_and_the_held_out_wordings():
    cfg = Config()
    cfg.questioning.numbers_constrained = "auto"  # auto: on for the in-process synthesizer
    cfg.train.eval_synthetic = "held.jsonl"
    settings = SynthesisSettings.of(cfg)
    assert settings.questioning is cfg.questioning and settings.env is cfg.env
    assert settings.numbers_constrained is True and settings.eval_synthetic == "held.jsonl"
    assert settings.heldout == HeldoutWordings.of(cfg) and settings.heldout.split
    served = cfg.models.synthesizer.model_copy(update={"backend": "openai"})
    cfg.models = cfg.models.model_copy(update={"synthesizer": served})
    assert SynthesisSettings.of(cfg).numbers_constrained is False  # auto with a served synthesizer: off
    cfg.questioning.numbers_constrained = "off"
    cfg.models = Config().models
    assert SynthesisSettings.of(cfg).numbers_constrained is False


@pytest.mark.parametrize(
    "before, after, every, reads",
    [(True, False, 0, True), (False, True, 0, True), (False, False, 2, True), (False, False, 0, False)],
)
def test_the_held_out_split_is_read_whenever_the_run_evaluates(before, after, every, reads):
    from evolvekit.env.registry import env_tasks

    cfg = Config()
    cfg.train = cfg.train.model_copy(update={"eval_before": before, "eval_after": after, "eval_every": every})
    split = {wording(t.query) for t in env_tasks(cfg.env, cfg.env.eval_split)}
    assert split and split.isdisjoint({wording(t.query) for t in env_tasks(cfg.env, cfg.env.train_split)})
    assert HeldoutWordings.of(cfg).split == (split if reads else frozenset())


def test_a_task_worded_like_a_panel_one_is_counted_as_the_panels_and_said(caplog):
    held = HeldoutWordings(split=frozenset({"add # and #"}), panels=frozenset({"halve # please"}))
    queries = (("a", "Halve 8, please."), ("b", "Add 1 and 2"), ("c", "Halve 10, PLEASE"), ("d", "Triple 3."))
    tasks = [Task(task_id=t, env_name="bfcl", query=q) for t, q in queries]
    funnel = Funnel(heldout_split_wording=3, heldout_panel_wording=5)
    with caplog.at_level(logging.INFO, logger="evolvekit.questioning.pipeline"):
        kept = held.drop(tasks, funnel)
    assert [t.task_id for t in kept] == ["d"]
    assert (funnel.heldout_split_wording, funnel.heldout_panel_wording) == (4, 7)
    assert logged(caplog, "evolvekit.questioning.pipeline") == [
        "synthesized task dropped: worded like a held-out panel task: 'Halve 8, please.'",
        "synthesized task dropped: worded like a held-out split task: 'Add 1 and 2'",
        "synthesized task dropped: worded like a held-out panel task: 'Halve 10, PLEASE'",
    ]


def test_a_backend_list_equal_to_a_familys_classes_gets_its_drawn_state():
    from evolvekit.env.bfcl.families import get_family

    tree = get_family("fs_chain").sandbox_state()["GorillaFileSystem"]
    assert pipeline.sandbox_for(EnvConfig(name="bfcl", backends=["GorillaFileSystem"])) == {
        "classes": ["GorillaFileSystem"],
        "initial_config": {"GorillaFileSystem": tree},
    }


def test_synthetic_metadata_by_hand():
    assert pipeline.synthetic_metadata({}) == {"category": "synthetic", "involved_classes": []}
    family = {"classes": ["MathAPI"], "tools": ["add"], "family": "arith", "initial_config": {}}
    assert pipeline.synthetic_metadata(family) == {
        "category": "synthetic", "involved_classes": ["MathAPI"], "allowed_tools": ["add"], "family": "arith"
    }  # fmt: skip
    assert pipeline.synthetic_metadata({"classes": ["A"], "tools": [], "family": ""}) == {
        "category": "synthetic", "involved_classes": ["A"]
    }  # fmt: skip


def test_the_explorer_is_scaffolded_by_its_own_model_and_the_synthesizer_warned_about_by_its_role(monkeypatch, caplog):
    made = []
    monkeypatch.setattr(pipeline, "seam", lambda llm: llm)
    monkeypatch.setattr(pipeline, "Explorer", lambda *a, **k: made.append(k) or "explorer")
    monkeypatch.setattr(pipeline, "TaskSynthesizer", lambda *a, **k: made.append(k) or "synth")
    monkeypatch.setattr(pipeline, "_UNSCAFFOLDED", set())
    q = Config().questioning.model_copy(update={"scaffold": "auto"})
    settings = SynthesisSettings(questioning=q, env=EnvConfig())
    with caplog.at_level(logging.WARNING, logger="evolvekit.questioning.pipeline"):
        pipeline.explorer_and_synthesizer(settings, _InProcess(), "xp", _Served(), "sp", _env, {})
    assert made[0]["scaffold"] is True and made[1]["targeted"] is False
    [line] = logged(caplog, "evolvekit.questioning.pipeline")
    assert line.startswith("questioning.scaffold: the synthesizer (served-7b) is served")
    assert "models.synthesizer" in line


def _counting_parts(monkeypatch, per_round):
    """curate_new keeps ``per_round`` fresh tasks each round (the parts fixture's keeps none)."""
    made = iter(range(1000))

    def curate_new(tasks, dedup, make_env, funnel, checks=None):
        return [Task(task_id=f"k{next(made)}", env_name="bfcl", query="k") for _ in range(per_round)]

    monkeypatch.setattr(pipeline, "curate_new", curate_new)


def test_at_most_n_tasks_are_kept_in_all_and_the_pass_filter_runs_only_with_a_probe_and_samples(monkeypatch, parts):
    _counting_parts(monkeypatch, 3)
    settings = SynthesisSettings.of(Config())
    kept, funnel, _ = pipeline.synthesize_tasks(settings, 4, "xl", "xp", "sl", "sp", _env)
    assert [t.task_id for t in kept] == ["k0", "k1", "k2", "k3"] and funnel.kept == 4  # a round's surplus dropped
    sampled = replace(settings, questioning=settings.questioning.model_copy(update={"pass_filter_samples": 2}))
    kept, funnel, _ = pipeline.synthesize_tasks(sampled, 2, "xl", "xp", "sl", "sp", _env)  # no probe: no filter
    assert len(kept) == 2 and funnel.unlearnable == 0
    probed = []

    def probe(ts):
        probed.append([t.task_id for t in ts])
        return [[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]][: len(ts)]

    kept, funnel, _ = pipeline.synthesize_tasks(settings, 2, "xl", "xp", "sl", "sp", _env, probe=probe)
    assert len(kept) == 2 and probed == []  # a probe without pass_filter_samples: no filter
    kept, funnel, _ = pipeline.synthesize_tasks(sampled, 2, "xl", "xp", "sl", "sp", _env, probe=probe)
    assert len(probed) == 2 and funnel.unlearnable == 4 and len(kept) == 2  # one of three kept per round
