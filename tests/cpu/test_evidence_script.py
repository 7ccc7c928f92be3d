"""benchmarks/evidence/evidence.py: where a report goes when no --out is given."""

import json
import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "evidence"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "audits"))

from evidence import default_out  # noqa: E402


def test_two_specs_of_one_family_report_to_different_files():
    a = default_out(Path("configs/evidence/evidence_arith_chain.yaml"), "arith_chain")
    b = default_out(Path("configs/evidence/evidence_arith_chain_credit.yaml"), "arith_chain")
    assert a == Path("benchmarks/results/evidence_arith_chain") and b == Path(
        "benchmarks/results/evidence_arith_chain_credit"
    )
    # a spec not named evidence_* keeps the family's name
    assert default_out(Path("/tmp/my_rows.yaml"), "fs_chain") == Path("benchmarks/results/evidence_fs_chain")


def test_every_committed_spec_reports_to_its_committed_results():
    root = Path(__file__).resolve().parents[2]
    for spec in sorted(root.glob("configs/evidence_*.yaml")):
        out = root / default_out(spec, "unused")
        assert out.with_suffix(".md").is_file(), spec.name


def test_tool_call_share_counts_rollouts_with_a_call_in_the_asked_iterations(tmp_path):
    from tool_call_share import tool_call_share  # benchmarks/evidence/tool_call_share.py

    from evolvekit.store.sqlite import RunStore
    from evolvekit.types import Step, ToolCall, Trajectory

    def traj(calls: bool) -> Trajectory:
        steps = [Step(index=0, action_text="3"), Step(index=1, action_text="x", tool_calls=[ToolCall(name="add")])]
        return Trajectory(task_id="t", steps=steps if calls else steps[:1])

    store = RunStore(tmp_path / "run.sqlite")
    with store.transaction() as c:
        store.put_trajectories(c, [traj(True), traj(False)], 0, "train")
        store.put_trajectories(c, [traj(True)], 1, "train")
        store.put_trajectories(c, [traj(True)], 2, "train")  # not asked
        store.put_trajectories(c, [traj(True)], 0, "eval")  # not training
    store.close()
    assert tool_call_share(tmp_path, [0, 1]) is None  # unfinished: no summary.json
    (tmp_path / "summary.json").write_text("{}")
    assert tool_call_share(tmp_path, [0, 1]) == (2, 3)
    assert tool_call_share(tmp_path, [2]) == (1, 1)


def test_evidence_paired_prints_the_paired_difference_of_two_rows(tmp_path, capsys, monkeypatch):
    import evidence_paired  # benchmarks/evidence/evidence_paired.py

    rows = {
        "a": {"seeds": [0, 1, 2], "per_seed_after": {"avg@8": [0.5, 0.6, 0.7], "best@8": [1.0, 1.0, 1.0]}},
        "b": {"seeds": [2, 1, 0, 3], "per_seed_after": {"avg@8": [0.6, 0.5, 0.4, 0.0], "best@8": [1.0] * 4}},
    }
    path = tmp_path / "r.json"
    path.write_text(__import__("json").dumps({"rows": rows}))
    monkeypatch.setattr(sys, "argv", ["evidence_paired.py", str(path), "a", "b"])
    evidence_paired.main()
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("| b | avg@8 | +0.100 ± 0.000") and "| 0.2500 | 3 / 0 | 3 |" in out[2]  # paired by seed
    assert "| 1.0000 | 0 / 0 | 3 |" in out[3]  # best@8: no difference


def test_mutation_copies_register_after_the_definitions_so_registered_functions_are_mutated():
    from mutation import undecorate_registrations  # benchmarks/audits/mutation.py

    root = Path(__file__).resolve().parents[2]
    text = (root / "src/evolvekit/attributing/sources.py").read_text()
    out = undecorate_registrations(text)
    assert not [line for line in out.splitlines() if line.startswith("@register")] and "def grounded_source(" in out
    assert out.endswith(
        'grounded_source = register_step_credit("grounded")(grounded_source)\n'
        'llm_source = register_step_credit("llm")(llm_source)\n'
    )
    ns: dict = {}
    exec(compile(out, "sources_undecorated.py", "exec"), ns)  # noqa: S102 - our own module's text
    assert ns["STEP_CREDIT"] == {"grounded": ns["grounded_source"], "llm": ns["llm_source"]}
    plain = "def f():\n    return 1\n"
    assert undecorate_registrations(plain) == plain


def test_a_kept_run_restores_to_the_same_figures_and_is_marked_finished(tmp_path):
    from keep_runs import keep, restore  # benchmarks/evidence/keep_runs.py

    from evolvekit.report.collection import load_groups
    from evolvekit.store.sqlite import RunStore
    from evolvekit.types import Step, Task, TaskSource, Trajectory

    run = tmp_path / "runs" / "row_a" / "seed3"
    run.mkdir(parents=True)
    store = RunStore(run / "run.sqlite")
    store.set_meta("code", "abc1234")
    with store.transaction() as c:
        store.put_tasks(
            c, [Task(task_id="s1", env_name="bfcl", query="What is 2 plus 3?", source=TaskSource.SYNTHETIC)], 0
        )
        store.put_trajectories(c, [Trajectory(task_id="s1", steps=[Step(index=0, action_text="5")])], 0, "train")
        store.put_metrics(c, 0, {"rollout/success_rate": 0.25, "attribution/good_ratio": 0.5})
        store.put_evaluation(c, "before", {"avg@8": 0.25, "best@8": 0.5})
        store.put_evaluation(c, "after", {"avg@8": 0.625, "best@8": 0.75})
    store.close()
    unfinished = tmp_path / "runs" / "row_a" / "seed4"
    unfinished.mkdir()
    RunStore(unfinished / "run.sqlite").close()
    (run / "summary.json").write_text('{"after": {"avg@8": 0.625}}')

    kept = keep(tmp_path / "runs", tmp_path / "kept", ["row_a"])
    assert kept == [tmp_path / "kept" / "row_a" / "seed3.json"]  # seed 4 has not finished
    assert keep(tmp_path / "runs", tmp_path / "other", ["row_b"]) == []

    fresh = tmp_path / "fresh"
    assert restore(tmp_path / "kept", fresh) == [fresh / "row_a" / "seed3"]
    assert restore(tmp_path / "kept", fresh) == []  # never over an existing run
    (orig,) = load_groups(tmp_path / "runs")[0].runs[:1]
    (back,) = load_groups(fresh)[0].runs
    assert back.evaluations == orig.evaluations and back.metrics == orig.metrics
    assert back.task_sources == orig.task_sources == {"synthetic": 1} and back.code == "abc1234"
    # ablate treats a run folder with a summary.json as finished (report/ablate.py), and aggregates that summary
    assert json.loads((fresh / "row_a" / "seed3" / "summary.json").read_text()) == {"after": {"avg@8": 0.625}}
    con = sqlite3.connect(fresh / "row_a" / "seed3" / "run.sqlite")
    assert con.execute("select count(*) from trajectories").fetchone() == (0,)  # episodes are not kept
    con.close()


@pytest.mark.slow
def test_a_mutmut_timeout_is_run_again_and_counted_by_that_run(tmp_path):
    from mutation import recheck_timeouts  # benchmarks/audits/mutation.py

    tests = tmp_path / "copy" / "mutants" / "tests"
    tests.mkdir(parents=True)
    (tmp_path / "copy" / "mutants" / "src").mkdir()
    (tests / "test_m.py").write_text(
        "import os, time\n\n\n"
        "def test_m():\n"
        "    m = os.environ.get('MUTANT_UNDER_TEST')\n"
        "    if m == 'm.hangs':\n"
        "        time.sleep(60)\n"
        "    assert m != 'm.caught'\n"
    )
    verdicts = recheck_timeouts(tmp_path / "copy", ["tests/test_m.py"], ["m.caught", "m.missed", "m.hangs"], 8)
    assert verdicts == {"m.caught": "killed", "m.missed": "survived", "m.hangs": "timeout"}


@pytest.mark.slow
def test_a_rechecked_mutant_runs_the_tests_mutmut_found_covering_its_function(tmp_path):
    from mutation import recheck_timeouts  # benchmarks/audits/mutation.py

    mutants = tmp_path / "copy" / "mutants"
    (mutants / "tests").mkdir(parents=True)
    (mutants / "src").mkdir()
    (mutants / "tests" / "test_m.py").write_text("def test_m():\n    assert True\n")
    (mutants / "tests" / "test_other.py").write_text("def test_other():\n    assert False\n")
    stats = {"tests_by_mangled_function_name": {"pkg.x_f": ["tests/test_m.py::test_m"]}}
    (mutants / "mutmut-stats.json").write_text(json.dumps(stats))
    modules = ["tests/test_m.py", "tests/test_other.py"]
    # x_f's mutant runs test_m only (passes: survived); a function mutmut has no tests for runs the module's (killed)
    assert recheck_timeouts(tmp_path / "copy", modules, ["pkg.x_f__mutmut_3", "pkg.x_g__mutmut_1"], 60) == {
        "pkg.x_f__mutmut_3": "survived",
        "pkg.x_g__mutmut_1": "killed",
    }


def test_a_resumed_mutation_look_keeps_its_kills_and_reopens_everything_else(tmp_path):
    """benchmarks/audits/mutation.py --resume: an unfinished look goes on in its copy; its kills stand (unless their
    function is named to be checked again), and its survivors, timeouts and crashes are undecided again, so the
    tests as they are now meet them."""
    import json

    from mutation import reopen_verdicts

    meta = tmp_path / "build.py.meta"
    codes = {"m.x_a__mutmut_1": 1, "m.x_a__mutmut_2": 0, "m.x_b__mutmut_1": 1, "m.x_b__mutmut_2": None}
    codes |= {"m.x_c__mutmut_1": 36, "m.x_c__mutmut_2": -11}
    meta.write_text(json.dumps({"exit_code_by_key": codes, "hash_by_function_name": {"x_a": "h"}}))
    assert reopen_verdicts(meta, ("m.x_b",)) == {"kept_kills": 1, "kept_survivors": 0, "reopened": 4}
    after = json.loads(meta.read_text())
    assert after["exit_code_by_key"] == {k: (1 if k == "m.x_a__mutmut_1" else None) for k in codes}
    assert after["hash_by_function_name"] == {"x_a": "h"}  # the rest of mutmut's file as it was
    # --reopen: only the named survivors are tested again; the others, and every timeout or crash, as before
    codes |= {"m.x_d__mutmut_1": 0}
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    assert reopen_verdicts(meta, (), ("m.x_d",)) == {"kept_kills": 2, "kept_survivors": 1, "reopened": 3}
    after = json.loads(meta.read_text())["exit_code_by_key"]
    assert after["m.x_a__mutmut_2"] == 0 and after["m.x_d__mutmut_1"] is None and after["m.x_c__mutmut_1"] is None


def test_a_looks_verdicts_saved_and_seeded_into_a_copy_without_them(tmp_path):
    """benchmarks/audits/mutation.py --save-verdicts / --resume: a look's verdict file is written where it is committed,
    with its counts; a later copy without verdicts gets it back (mutmut keeps each verdict whose function is
    unchanged); a copy with its own verdicts keeps them."""
    import json

    from mutation import save_verdicts, seed_verdicts

    meta = tmp_path / "copy" / "mutants" / "src" / "evolvekit" / "train" / "trainer.py.meta"
    meta.parent.mkdir(parents=True)
    codes = {"m.x_a__mutmut_1": 1, "m.x_a__mutmut_2": 0, "m.x_a__mutmut_3": None, "m.x_b__mutmut_1": 1}
    codes |= {"m.x_b__mutmut_2": 36}
    data = {"exit_code_by_key": codes, "hash_by_function_name": {"x_a": "h1", "x_b": "h2"}}
    meta.write_text(json.dumps(data))
    saved = tmp_path / "results" / "mutation_verdicts" / "trainer.json"
    assert save_verdicts(meta, saved) == {"killed": 2, "survived": 1, "open": 1, "other": 1}
    assert json.loads(saved.read_text()) == data

    fresh = tmp_path / "fresh" / "mutants" / "src" / "evolvekit" / "train" / "trainer.py.meta"
    assert seed_verdicts(fresh, saved) is True
    assert json.loads(fresh.read_text()) == data
    own = {"exit_code_by_key": {"m.x_a__mutmut_1": 0}, "hash_by_function_name": {}}
    fresh.write_text(json.dumps(own))
    assert seed_verdicts(fresh, saved) is False  # never over a copy's own verdicts
    assert json.loads(fresh.read_text()) == own
    assert seed_verdicts(tmp_path / "other.meta", tmp_path / "none.json") is False  # nothing saved: nothing seeded
    assert not (tmp_path / "other.meta").exists()


def test_the_health_table_names_the_closed_tasks_their_own_share_and_the_borrowed_ones():
    from evidence import _closed  # benchmarks/evidence/evidence.py

    from evolvekit.report.evidence import RunHealth

    assert _closed(RunHealth(seed=0)) == "n/a"
    assert _closed(RunHealth(seed=0, closed_tasks=24.0, self_referenced_share=0.75)) == "24 (0.750)"
    borrowed = RunHealth(seed=0, closed_tasks=24.0, self_referenced_share=0.75, similar_referenced=3.0)
    assert _closed(borrowed) == "24 (0.750; borrowed 3)"


def test_synthesized_overlap_counts_a_task_worded_like_a_held_out_one(tmp_path):
    """benchmarks/audits/synthesized_overlap.py (issue 76.3): a kept run's synthesized task in a held-out task's
    wording (other numbers) is counted against that panel, with word overlap 1.0; an unrelated one is not; a
    person-written task of the run is not a synthesized one."""
    from synthesized_overlap import overlap_rows

    from evolvekit.env.bfcl.families import get_family

    held = get_family("arith").tasks("test", 1)[0].query
    import re

    twin = re.sub(r"\d+", "7", held)
    tasks = [["a", "synthetic", 0, json.dumps({"query": twin})], ["b", "synthetic", 0, json.dumps({"query": "Zap."})]]
    tasks.append(["c", "real", 0, json.dumps({"query": held})])
    seed = tmp_path / "self_examples" / "seed3.json"
    seed.parent.mkdir()
    seed.write_text(
        json.dumps({"tables": {"tasks": {"columns": ["task_id", "source", "first_iteration", "json"], "rows": tasks}}})
    )
    rows = overlap_rows(Path("configs/evidence/evidence_self_examples.yaml"), tmp_path)
    assert [(r["row"], r["seed"], r["tasks"]) for r in rows] == [("self_examples", 3, 2)]
    split, panel2 = rows[0]["panels"].values()
    assert (split["worded_like"], split["max_overlap"], split["near"]) == (1, 1.0, 1)
    assert panel2["worded_like"] == 0 and panel2["max_overlap"] < 1.0
