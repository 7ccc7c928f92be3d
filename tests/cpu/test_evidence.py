"""Evidence figures (report/evidence.py): intervals against hand-computed values, paired differences, Steps@0.9
and AUC per row, helper health from a run's metrics, and the line a run prints next to a committed baseline."""

from pathlib import Path

import pytest

from evolvekit.config import load_config
from evolvekit.report.collection import RunGroup
from evolvekit.report.evidence import (
    EvidenceFile,
    budget_of,
    comparison_line,
    difference,
    interval,
    only_seeds,
    row_results,
    run_health,
    t_quantile,
)
from evolvekit.report.figures import RunSummary


def test_interval_is_the_t_interval_of_the_mean():
    iv = interval([0.1, 0.2, 0.3])
    # mean 0.2, s = 0.1, t_{0.975,2} = 0.95 / √(2 · 0.975 · 0.025) = 4.30265: half-width 4.30265 · 0.1 / √3 = 0.248414
    assert iv.mean == pytest.approx(0.2) and iv.std == pytest.approx(0.1) and iv.n == 3 and iv.confidence == 0.95
    assert iv.low == pytest.approx(0.2 - 0.248414, abs=1e-5) and iv.high == pytest.approx(0.448414, abs=1e-5)
    one = interval([0.5])
    assert (one.low, one.high, one.std) == (0.5, 0.5, 0.0)
    d = difference([0.3, 0.5], [0.1, 0.2])  # pairs: 0.2, 0.3 -> mean 0.25, s = 0.0707, t_{0.975,1} = 12.706
    assert d.mean == pytest.approx(0.25) and d.high - d.mean == pytest.approx(12.706 * 0.070711 / 2**0.5, rel=1e-4)
    with pytest.raises(ValueError):
        difference([0.1], [0.1, 0.2])


def test_intervals_at_another_level_use_that_levels_t_quantile():
    """A second look at the same data reports 97.5% intervals (spec ``confidence``); hand values: at df = 1 the t
    quantile is tan(π(p − ½)), at df = 2 it is (2p − 1) / √(2p(1 − p)), with p = (1 + confidence) / 2."""
    import math

    assert t_quantile(0.95, 1) == pytest.approx(12.706, abs=1e-3) and t_quantile(0.95, 10) == pytest.approx(
        2.228, abs=1e-3
    )
    assert t_quantile(0.975, 1) == pytest.approx(math.tan(math.pi * 0.4875), rel=1e-9)  # 25.452
    assert t_quantile(0.975, 2) == pytest.approx(0.975 / math.sqrt(2 * 0.9875 * 0.0125), rel=1e-9)  # 6.205
    d = difference([0.3, 0.5], [0.1, 0.2], confidence=0.975)  # pairs 0.2, 0.3: s = 0.070711, half = 25.452 · s / √2
    assert d.confidence == 0.975 and d.high - d.mean == pytest.approx(25.4517 * 0.070711 / 2**0.5, rel=1e-4)
    assert interval([0.1, 0.2, 0.3], 0.975).high > interval([0.1, 0.2, 0.3]).high  # wider than at 95%
    grpo = RunGroup("grpo", [_run("grpo", s, 0.1, 0.2, a) for s, a in ((0, 0.3), (1, 0.4), (2, 0.5))])
    full = RunGroup("overall", [_run("overall", s, 0.1, 0.4, a) for s, a in ((0, 0.4), (1, 0.6), (2, 0.6))])
    rows = row_results([grpo, full], "grpo", confidence=0.975)
    diff = rows["overall"].vs_baseline["avg@4"]  # pairs 0.1, 0.2, 0.1: s = 0.057735, t_{0.9875,2} = 6.2054
    assert diff.confidence == 0.975 and diff.high - diff.mean == pytest.approx(6.20537 * 0.057735 / 3**0.5, rel=1e-4)
    assert {iv.confidence for r in rows.values() for iv in [*r.after.values(), *r.before.values()]} == {0.975}


def _run(row: str, seed: int, before: float, mid: float, after: float, metrics=None) -> RunSummary:
    m = {0: {}, 1: {}, 2: {"eval/avg@4": mid}, 3: {}}
    for it, extra in (metrics or {}).items():
        m[it].update(extra)
    return RunSummary(
        Path(f"/runs/{row}/seed{seed}"),
        m,
        {"before": {"avg@4": before}, "after": {"avg@4": after, "split": "test"}},
        helper_sources={"attributor": "grounded"},
    )


def test_rows_get_intervals_paired_differences_and_efficiency_against_the_baseline():
    grpo = RunGroup("grpo", [_run("grpo", s, 0.1, 0.2, a) for s, a in ((0, 0.3), (1, 0.4), (2, 0.5))])
    full = RunGroup("overall", [_run("overall", s, 0.1, 0.4, a) for s, a in ((0, 0.4), (1, 0.6), (2, 0.6))])
    unfinished = _run("overall", 3, 0.1, 0.1, 0.1)
    unfinished.evaluations.pop("after")
    full.runs.append(unfinished)  # not finished: left out of every figure
    rows = row_results([grpo, full], "grpo")
    g, o = rows["grpo"], rows["overall"]
    assert o.seeds == [0, 1, 2] and o.per_seed_after["avg@4"] == [0.4, 0.6, 0.6]
    assert o.after["avg@4"].mean == pytest.approx(1.6 / 3) and o.before["avg@4"].mean == pytest.approx(0.1)
    assert o.vs_baseline["avg@4"].mean == pytest.approx((0.1 + 0.2 + 0.1) / 3) and not g.vs_baseline
    # mean curves: grpo (0, 0.1) (3, 0.2) (4, 0.4); overall (0, 0.1) (3, 0.4) (4, 0.5333): target 0.9 · 0.4 = 0.36
    assert g.steps_at_09 == 4.0 and o.steps_at_09 == 3.0
    assert g.target == pytest.approx(0.36) and o.target == pytest.approx(0.36)  # every row shows the one target
    assert o.auc == pytest.approx(((0.1 + 0.4) / 2 * 3 + (0.4 + 1.6 / 3) / 2) / 4)
    assert "split" not in o.after


def test_specs_sharing_a_run_folder_report_only_their_own_seeds():
    grpo = RunGroup("grpo", [_run("grpo", s, 0.0, 0.0, 0.0) for s in range(4)])
    full = RunGroup("overall", [_run("overall", s, 0.0, 0.1, a) for s, a in enumerate((0.2, 0.4, 0.6, 0.8))])
    first = row_results(only_seeds([grpo, full], [0, 1]), "grpo")
    again = row_results(only_seeds([grpo, full], [2, 3, 9]), "grpo")
    assert first["overall"].seeds == [0, 1] and first["overall"].after["avg@4"].mean == pytest.approx(0.3)
    assert again["overall"].seeds == [2, 3] and again["grpo"].seeds == [2, 3]
    assert again["overall"].vs_baseline["avg@4"].mean == pytest.approx(0.7)
    assert len(full.runs) == 4  # the loaded groups are left as they were


def test_steps_at_09_is_undefined_when_the_baseline_never_learned():
    grpo = RunGroup("grpo", [_run("grpo", s, 0.0, 0.0, 0.0) for s in range(3)])
    full = RunGroup("overall", [_run("overall", s, 0.0, 0.0, a) for s, a in ((0, 0.0), (1, 0.0), (2, 0.02))])
    rows = row_results([grpo, full], "grpo")
    assert rows["grpo"].steps_at_09 is None and rows["overall"].steps_at_09 is None
    assert rows["grpo"].target is None and rows["overall"].target is None
    assert rows["overall"].auc == pytest.approx((0.02 / 3) / 2 / 4)  # mean curve (0, 0) (3, 0) (4, 0.02 / 3)


def test_run_health_reads_the_helpers_from_the_metrics():
    run = _run(
        "overall",
        0,
        0.1,
        0.2,
        0.3,
        {
            0: {
                "attribution/mixed_groups": 2.0,
                "attribution/mixed_groups_nondegenerate": 1.0,
                "navigating/extraction_jobs": 4.0,
                "navigating/validated_share": 0.5,
                "navigating/cold_start_extraction_jobs": 2.0,
                "navigating/cold_start_validated_share": 1.0,
                "tasks/synthetic_pool": 8.0,
                "time/iteration_s": 60.0,
            },
            1: {"attribution/mixed_groups": 2.0, "attribution/mixed_groups_nondegenerate": 2.0},
        },
    )
    h = run_health(run, 0)
    assert h.attribution_mixed_groups == pytest.approx(3 / 4)
    assert h.extraction_jobs == 6.0 and h.validated_share == pytest.approx((2 + 2) / 6)
    assert h.judge_calls is None and h.judge_fallback_rate is None  # no judge in this run
    assert h.synthetic_tasks == 8.0 and h.minutes == pytest.approx(1.0)


def test_run_health_at_zero_counts_and_equal_counts():
    """A helper that reported zero groups has no share (not a division by zero); a run with no metrics has no
    minutes; the validated share weighs the cold start's jobs and the loop's jobs alike, also when they are equal."""
    zero = run_health(_run("overall", 0, 0.1, 0.2, 0.3, {0: {"attribution/mixed_groups": 0.0}}), 0)
    assert zero.attribution_mixed_groups is None
    jobs = {
        "navigating/extraction_jobs": 2.0,
        "navigating/validated_share": 1.0,
        "navigating/cold_start_extraction_jobs": 2.0,
        "navigating/cold_start_validated_share": 0.5,
    }
    assert run_health(_run("overall", 0, 0.1, 0.2, 0.3, {0: jobs}), 0).validated_share == pytest.approx(3 / 4)
    bare = _run("overall", 0, 0.1, 0.2, 0.3)
    bare.metrics = {}
    assert run_health(bare, 0).minutes is None


def test_a_run_prints_the_committed_baseline_only_for_the_same_family_and_budget(tmp_path):
    cfg = load_config(Path("configs/grpo.yaml"), [])
    grpo = RunGroup("grpo", [_run("grpo", s, 0.1, 0.2, a) for s, a in ((0, 0.3), (1, 0.4), (2, 0.5))])
    ev = EvidenceFile(
        family="arith_turns", budget=budget_of(cfg), baseline="grpo", rows=row_results([grpo], "grpo"), command="x",
        commit="abc1234",
    )  # fmt: skip
    path = tmp_path / "evidence.json"
    path.write_text(ev.model_dump_json())
    line = comparison_line(path, cfg, {"avg@4": 0.45})
    assert "grpo 0.100 -> 0.400 ± 0.100" in line and "3 seeds" in line and "this run -> 0.45" in line
    assert "committed at abc1234:" in line
    ev.commit, ev.rows["grpo"].commit = "abc1234, def5678", "def5678"  # a merged file: the baseline row's own code
    path.write_text(ev.model_dump_json())
    assert "committed at def5678:" in comparison_line(path, cfg, {})
    # a run of other code says so; a run of the rows' own code does not
    assert "this run's code is 9999999 (uncommitted changes), not the rows'" in comparison_line(
        path, cfg, {}, "9999999 (uncommitted changes)"
    )
    assert "this run's code" not in comparison_line(path, cfg, {}, "def5678")
    other = load_config(Path("configs/grpo.yaml"), ["train.iterations=2"])
    assert "not comparable" in comparison_line(path, other, {}) and "train.iterations" in comparison_line(
        path, other, {}
    )
    # the row named like the run (its configuration over seeds) is printed next to the baseline's, with Δ
    ours = RunGroup("quickstart", [_run("quickstart", s, 0.1, 0.2, a) for s, a in ((0, 0.6), (1, 0.7), (2, 0.8))])
    ev.rows = row_results([grpo, ours], "grpo")
    path.write_text(ev.model_dump_json())
    line = comparison_line(path, cfg.model_copy(update={"run": cfg.run.model_copy(update={"name": "quickstart"})}), {})
    assert "grpo 0.100 -> 0.400 ± 0.100" in line and "quickstart (this config) 0.100 -> 0.700 ± 0.100" in line
    assert "Δ +0.300 (95% CI +0.300..+0.300)" in line and "this run" not in line
    assert "this config" not in comparison_line(path, cfg, {})  # a run named like the baseline: the baseline only
    # before the baseline row has finished, the run's own row is printed alone, the baseline said to be missing
    ev.rows = row_results([ours], "grpo")
    path.write_text(ev.model_dump_json())
    named = cfg.model_copy(update={"run": cfg.run.model_copy(update={"name": "quickstart"})})
    line = comparison_line(path, named, {"avg@4": 0.5})
    assert "grpo not finished yet, quickstart (this config) 0.100 -> 0.700 ± 0.100" in line and "Δ" not in line
    assert "quickstart over the base model +0.600" in line and "this run -> 0.5" in line
    assert "no finished 'grpo' row yet" in comparison_line(path, cfg, {})  # neither row: nothing to print
    assert "no committed baseline" in comparison_line(tmp_path / "missing.json", cfg, {})
    (tmp_path / "bad.json").write_text("{}")
    assert "not a results file" in comparison_line(tmp_path / "bad.json", cfg, {})


def test_merge_keeps_committed_rows_and_pairs_fresh_rows_with_the_committed_baseline():
    from evolvekit.report.evidence import merge_rows

    grpo = RunGroup("grpo", [_run("grpo", s, 0.1, 0.2, a) for s, a in ((0, 0.3), (1, 0.4), (2, 0.5))])
    committed = EvidenceFile(
        family="arith", budget={}, baseline="grpo", rows=row_results([grpo], "grpo"), command="c", commit="old"
    )
    committed.rows["grpo"].curve = []  # a file written before curves were kept: no Steps@0.9 for new rows
    new = RunGroup("overall", [_run("overall", s, 0.1, 0.4, a) for s, a in ((0, 0.4), (1, 0.6), (2, 0.6))])
    fresh = row_results([new], "grpo")
    assert not fresh["overall"].vs_baseline  # the baseline has no runs here
    rows = merge_rows(fresh, committed, "grpo", "new")
    assert list(rows) == ["grpo", "overall"] and rows["grpo"].commit == "old" and rows["overall"].commit == "new"
    assert rows["grpo"].after == committed.rows["grpo"].after
    d = rows["overall"].vs_baseline["avg@4"]  # pairs 0.4-0.3, 0.6-0.4, 0.6-0.5
    assert d.mean == pytest.approx(0.4 / 3) and d.n == 3
    assert rows["overall"].steps_at_09 is None
    committed.rows["grpo"].curve = [(0, 0.1), (3, 0.2), (4, 0.4)]  # with its curve: target 0.36, reached at 3
    assert merge_rows(fresh, committed, "grpo", "new")["overall"].steps_at_09 == 3.0


def test_steps_against_a_committed_baseline_without_its_curve_use_its_final_value_when_that_is_its_best():
    from evolvekit.report.evidence import baseline_best, merge_rows

    grpo = RunGroup("grpo", [_run("grpo", s, 0.1, 0.2, a) for s, a in ((0, 0.3), (1, 0.4), (2, 0.5))])
    committed = EvidenceFile(
        family="arith", budget={"train.iterations": 4}, baseline="grpo", rows=row_results([grpo], "grpo"),
        command="c", commit="old",
    )  # fmt: skip
    base = committed.rows["grpo"]
    base.curve = []  # written before curves were kept; its own Steps@0.9 was 4, the last evaluation
    assert base.steps_at_09 == 4.0 and baseline_best(base, 4) == pytest.approx(0.4)  # the mean final avg@4
    new = RunGroup("overall", [_run("overall", s, 0.1, 0.4, a) for s, a in ((0, 0.4), (1, 0.6), (2, 0.6))])
    slow = RunGroup("slow", [_run("slow", s, 0.1, 0.2, a) for s, a in ((0, 0.3), (1, 0.3), (2, 0.3))])
    rows = merge_rows(row_results([new, slow], "grpo"), committed, "grpo", "new")
    assert rows["overall"].steps_at_09 == 3.0 and rows["overall"].target == pytest.approx(0.36)
    assert rows["slow"].steps_at_09 is None and rows["slow"].target == pytest.approx(0.36)  # never reached 0.36
    committed.rows["overall"] = rows["overall"].model_copy(update={"steps_at_09": None, "target": None})
    assert merge_rows({}, committed, "grpo", "new")["overall"].steps_at_09 == 3.0  # a committed row with its curve
    # its Steps@0.9 before the end: an earlier point may have been its best, which is not known
    base.steps_at_09 = 3.0
    assert baseline_best(base, 4) is None
    assert merge_rows(row_results([new], "grpo"), committed, "grpo", "new")["overall"].target is None


def test_a_row_names_the_code_its_runs_recorded():
    from evolvekit.report.evidence import merge_rows

    runs = [_run("overall", s, 0.1, 0.4, 0.5) for s in (0, 1)]
    for r in runs:
        r.code = "abc1234"
    row = row_results([RunGroup("overall", runs)], "grpo")["overall"]
    assert row.commit == "abc1234"
    committed = EvidenceFile(family="arith", budget={}, baseline="grpo", rows={}, command="c", commit="old")
    assert merge_rows({"overall": row}, committed, "grpo", "checkout")["overall"].commit == "abc1234"
    runs[1].code = "def5678"  # two codes in one row: both named
    assert row_results([RunGroup("overall", runs)], "grpo")["overall"].commit == "abc1234, def5678"
    runs[1].code = None  # a run made before runs recorded their code: the row's code is not known from its runs
    assert row_results([RunGroup("overall", runs)], "grpo")["overall"].commit is None


def test_code_commit_names_the_checkout_and_its_uncommitted_changes(tmp_path):
    import subprocess

    from evolvekit.provenance import DIRTY, code_commit

    assert code_commit(tmp_path).startswith("evolvekit ")  # not a git checkout
    git = ["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert code_commit(tmp_path) == head
    (tmp_path / "notes.txt").write_text("untracked, outside src: not a change of the code")
    assert code_commit(tmp_path) == head
    (tmp_path / "src" / "m.py").write_text("x = 2\n")
    assert code_commit(tmp_path) == head + DIRTY


def test_a_regenerated_results_file_keeps_its_part_written_by_hand():
    from evolvekit.report.evidence import HAND_MARK, with_hand_part

    old = f"# tables of then\n| a | 0.1 |\n\n{HAND_MARK}\n## Reading\nGRPO never learned.\n"
    new = "# tables\n| a | 0.2 |\n"
    kept = with_hand_part(new, old)
    assert kept.startswith(new.rstrip()) and "0.1" not in kept
    assert kept.endswith(f"{HAND_MARK}\n## Reading\nGRPO never learned.\n")
    assert with_hand_part(new, "# tables of then\n## Reading\nno mark\n") == new  # nothing marked: nothing kept
    assert with_hand_part(new, None) == new


def test_sign_flip_p_against_hand_enumeration():
    from evolvekit.report.evidence import improved_share, paired, recovered_share, sign_flip_p

    # [1, 1, 1]: of 8 sign assignments, |sum| >= 3 only for all + and all -: 2/8
    assert sign_flip_p([1.0, 1.0, 1.0]) == 0.25
    # [2, 1]: sums 3, 1, -1, -3; |sum| >= 3 twice: 2/4
    assert sign_flip_p([2.0, 1.0]) == 0.5
    assert sign_flip_p([1.0, -1.0]) == 1.0  # observed 0: every assignment is as extreme
    assert sign_flip_p([0.1] * 10) == 2 / 1024
    assert improved_share([0.2, 0.0, -0.1, 0.3]) == 0.5  # a tie is not an improvement
    p = paired([0.5, 0.4, 0.3], [0.2, 0.2, 0.2])
    assert [round(d, 9) for d in p.diffs] == [0.3, 0.2, 0.1] and p.sign_flip_p == 0.25 and p.improved == 1.0
    assert abs(p.interval.mean - 0.2) < 1e-12
    assert recovered_share(0.1, 0.4) == 0.25 and recovered_share(0.1, 0.0) is None
    with pytest.raises(ValueError):
        sign_flip_p([0.1] * 25)


def test_rows_report_their_lift_over_the_base_model_and_an_oracle_mark():
    from evolvekit.report.evidence import row_results

    runs = [_run("env_only", s, 0.2, 0.3, a) for s, a in ((0, 0.5), (1, 0.4), (2, 0.1))]
    oracle = [_run("oracle", s, 0.2, 0.3, 0.6) for s in (0, 1)]
    for r in oracle:
        r.helper_sources["gold"] = "oracle"
    rows = row_results([RunGroup("env_only", runs), RunGroup("oracle", oracle)], "grpo")
    d = rows["env_only"].vs_before["avg@4"]
    assert [round(x, 9) for x in d.diffs] == [0.3, 0.2, -0.1] and d.improved == 2 / 3
    assert not rows["env_only"].oracle and rows["oracle"].oracle


def test_the_end_line_names_the_configs_own_row_and_its_lift_over_the_base_model(tmp_path):
    from evolvekit.report.evidence import EvidenceFile, budget_of, comparison_line, row_results

    cfg = load_config(None, ["train.compare_row=env_only"])
    base = RunGroup("grpo_person", [_run("grpo_person", s, 0.2, 0.3, a) for s, a in ((0, 0.6), (1, 0.7))])
    ours = RunGroup("env_only", [_run("env_only", s, 0.2, 0.3, a) for s, a in ((0, 0.5), (1, 0.4))])
    ev = EvidenceFile(
        family="arith", budget=budget_of(cfg), baseline="grpo_person",
        rows=row_results([base, ours], "grpo_person"), command="x", commit="c",
    )  # fmt: skip
    path = tmp_path / "e.json"
    path.write_text(ev.model_dump_json())
    line = comparison_line(path, cfg, {"avg@4": 0.5})
    assert "env_only (this config) 0.200 -> 0.450" in line and "over the base model +0.250" in line, line
    assert "2 of 2 seeds improve" in line and "sign-flip p 0.5000" in line


def test_run_health_reads_the_judge_the_grounded_agreement_and_the_self_referenced_share():
    """The figures the first health test leaves out, each by hand: two iterations of judge calls and fallbacks, the
    attributor's agreement with the grounded labels (a mean over the iterations that report it), the closed
    person-written tasks, the share step credit had a self-derived reference of the task's own for and the number that
    borrowed a similar task's success, the first synthetic pool."""
    run = _run(
        "env_only",
        7,
        0.1,
        0.2,
        0.3,
        {
            0: {
                "judge/calls": 4.0,
                "judge/fallbacks": 1.0,
                "attribution/agreement_with_grounded": 0.5,
                "attribution/closed_tasks": 3.0,
                "attribution/self_referenced": 1.0,
                "tasks/synthetic_pool": 5.0,
            },
            1: {
                "judge/calls": 6.0,
                "judge/fallbacks": 2.0,
                "attribution/closed_tasks": 1.0,
                "attribution/similar_referenced": 1.0,
            },
            2: {
                "attribution/agreement_with_grounded": 1.0,
                "attribution/self_referenced": 1.0,
                "attribution/similar_referenced": 1.0,
            },
            3: {"tasks/synthetic_pool": 9.0, "navigating/extraction_jobs": 0.0},
        },
    )
    h = run_health(run, 7)
    assert h.seed == 7 and h.helper_sources == {"attributor": "grounded"}
    assert h.judge_calls == 10.0 and h.judge_fallback_rate == pytest.approx(3 / 10)
    assert h.attribution_agreement_with_grounded == pytest.approx(0.75)
    assert h.closed_tasks == 4.0 and h.self_referenced_share == pytest.approx(2 / 4) and h.similar_referenced == 2.0
    assert h.synthetic_tasks == 5.0  # the pool the run started with, not a later one
    assert h.extraction_jobs == 0.0 and h.validated_share is None  # extraction on, but no job: no share
    assert h.attribution_mixed_groups is None and h.minutes == 0.0  # no attribution metric; no iteration time
    quiet = run_health(_run("grpo", 0, 0.1, 0.2, 0.3, {0: {"judge/calls": 0.0}}), 0)
    assert quiet.judge_calls == 0.0 and quiet.judge_fallback_rate is None  # judge on, never called: no rate
    assert quiet.closed_tasks is None and quiet.self_referenced_share is None and quiet.extraction_jobs is None
    assert quiet.similar_referenced is None
    older = run_health(_run("p", 0, 0.1, 0.2, 0.3, {0: {"attribution/closed_tasks": 2.0}}), 0)
    assert older.closed_tasks == 2.0 and older.similar_referenced is None  # a run that did not log borrowing


# the two-sided t quantile at 90% with df = 2: t_{0.95,2} = 0.9 / √(2 · 0.95 · 0.05)
T90_DF2 = 2.919986


def test_the_statistics_keep_their_level_their_n_and_their_one_value_cases():
    """Cases the hand tables above do not reach: one value (a point, n = 1, at the level asked for), one paired
    difference (p = 1: both sign assignments are as extreme), a paired interval at another level, and each refusal
    names its cause."""
    from evolvekit.report.evidence import improved_share, paired, sign_flip_p

    one = interval([0.5], 0.9)
    assert (one.n, one.confidence, one.low, one.high) == (1, 0.9, 0.5, 0.5)
    assert sign_flip_p([0.3]) == 1.0 and sign_flip_p([0.0]) == 1.0
    p = paired([0.5, 0.4, 0.3], [0.2, 0.2, 0.2], 0.9)
    assert p.interval.confidence == 0.9  # diffs 0.3, 0.2, 0.1: mean 0.2, s = 0.1
    assert p.interval.high - p.interval.mean == pytest.approx(T90_DF2 * 0.1 / 3**0.5, rel=1e-5)
    with pytest.raises(ValueError, match="^no values$"):
        interval([])
    with pytest.raises(ValueError, match="^no differences$"):
        sign_flip_p([])
    with pytest.raises(ValueError, match="^no differences$"):
        improved_share([])
    with pytest.raises(ValueError, match="^exact sign-flip enumeration is for at most 24 differences, got 25$"):
        sign_flip_p([0.1] * 25)
    with pytest.raises(ValueError, match="^paired difference needs the same seeds on both sides$"):
        paired([0.1], [0.1, 0.2])
    with pytest.raises(ValueError, match="^paired difference needs the same seeds in both rows$"):
        difference([0.1], [0.1, 0.2])


def test_only_runs_named_seed_k_have_a_seed_and_the_hand_part_follows_the_first_mark():
    from evolvekit.report.evidence import HAND_MARK, with_hand_part

    runs = [_run("grpo", 3, 0.0, 0.0, 0.1)]
    for name in ("seedx", "base3", "seed"):
        odd = _run("grpo", 0, 0.0, 0.0, 0.2)
        odd.run_dir = Path(f"/runs/grpo/{name}")
        runs.append(odd)
    assert [len(g.runs) for g in only_seeds([RunGroup("grpo", runs)], [3])] == [1]
    assert [len(g.runs) for g in only_seeds([RunGroup("grpo", runs)], [-1])] == [3]  # the "no seed" mark is -1
    # the tables' trailing blank lines go, their leading ones stay; the hand part starts at the first mark
    old = f"old\n{HAND_MARK}\nreading\n{HAND_MARK}\nmore\n"
    assert with_hand_part("\n# tables \n\n\n", old) == f"\n# tables \n\n{HAND_MARK}\nreading\n{HAND_MARK}\nmore\n"


def test_rows_after_an_unfinished_one_are_reported_and_a_partial_before_gives_no_paired_lift():
    """A row whose runs have all not finished is skipped, not the end of the rows; only ``name@k`` numbers are
    figures; a row whose before figure is missing in some run has a before interval over the others but no paired
    lift; the paired lift is at the level asked for."""
    waiting = _run("waiting", 0, 0.1, 0.1, 0.1)
    waiting.evaluations.pop("after")
    runs = [_run("overall", s, 0.1, 0.2, a) for s, a in ((0, 0.4), (1, 0.5), (2, 0.6))]
    runs[0].evaluations["after"]["tasks"] = 16  # a number without "@": not a figure
    rows = row_results([RunGroup("waiting", [waiting]), RunGroup("overall", runs)], "grpo", 0.9)
    assert list(rows) == ["overall"] and list(rows["overall"].after) == ["avg@4"]
    lift = rows["overall"].vs_before["avg@4"]  # diffs 0.3, 0.4, 0.5: mean 0.4, s = 0.1
    assert lift.interval.confidence == 0.9 and lift.interval.high == pytest.approx(0.4 + T90_DF2 * 0.1 / 3**0.5)
    runs[1].evaluations["before"] = {}
    partial = row_results([RunGroup("overall", runs)], "grpo")["overall"]
    assert partial.before["avg@4"].n == 2 and not partial.vs_before


def test_merge_pairs_two_seeds_at_the_level_asked_for_and_keeps_a_committed_rows_steps_without_a_curve():
    from evolvekit.report.evidence import merge_rows

    grpo = RunGroup("grpo", [_run("grpo", s, 0.1, 0.2, a) for s, a in ((0, 0.3), (1, 0.4))])
    committed = EvidenceFile(
        family="arith", budget={}, baseline="grpo", rows=row_results([grpo], "grpo"), command="c", commit="old"
    )
    old = RunGroup("old", [_run("old", s, 0.1, 0.2, 0.5) for s in (0, 1)])
    committed.rows["old"] = row_results([old], "grpo")["old"].model_copy(update={"curve": [], "steps_at_09": 2.0})
    new = RunGroup("overall", [_run("overall", s, 0.1, 0.4, a) for s, a in ((0, 0.4), (1, 0.6))])
    rows = merge_rows(row_results([new], "grpo"), committed, "grpo", "new", 0.9)
    d = rows["overall"].vs_baseline["avg@4"]  # pairs 0.1, 0.2: two seeds are enough
    assert d.n == 2 and d.confidence == 0.9 and d.mean == pytest.approx(0.15)
    assert rows["old"].steps_at_09 == 2.0  # no curve to measure again: its committed figure stays
    # a fresh baseline's curve sets the target: its best mean value 0.45 (committed: 0.35), reached by overall at 3
    better = RunGroup("grpo", [_run("grpo", s, 0.1, 0.2, 0.45) for s in (0, 1)])
    again = merge_rows(row_results([better, new], "grpo"), committed, "grpo", "new")
    assert again["overall"].target == pytest.approx(0.9 * 0.45)


def test_a_figure_the_baseline_did_not_measure_gets_no_difference():
    """A row's figure that the baseline's runs lack (a best@k the baseline never measured) gets no difference, not
    a NaN one; the figures both measured are paired as before."""
    grpo = RunGroup("grpo", [_run("grpo", s, 0.1, 0.2, a) for s, a in ((0, 0.3), (1, 0.4), (2, 0.5))])
    full = RunGroup("overall", [_run("overall", s, 0.1, 0.4, a) for s, a in ((0, 0.4), (1, 0.6), (2, 0.9))])
    for r, best in zip(full.runs, (0.5, 0.7, 1.0)):
        r.evaluations["after"]["best@4"] = best
    row = row_results([grpo, full], "grpo")["overall"]
    assert list(row.vs_baseline) == ["avg@4"] and row.vs_baseline["avg@4"].mean == pytest.approx(0.7 / 3)
    assert row.after["best@4"].n == 3


def test_a_run_lacking_a_figure_its_row_has_is_named():
    runs = [_run("overall", s, 0.1, 0.2, a) for s, a in ((0, 0.4), (1, 0.5), (2, 0.6))]
    runs[1].evaluations["after"]["best@4"] = 0.9
    lacking = r"row 'overall': best@4 after training is not a number in /runs/overall/seed0, /runs/overall/seed2$"
    with pytest.raises(ValueError, match=lacking):
        row_results([RunGroup("overall", runs)], "grpo")


def test_committed_rows_paired_with_another_baseline_are_paired_again_with_this_one():
    """A spec whose baseline is a committed file's non-baseline row (the similar-success spec against the
    credit-fix file): every committed difference was against the file's own baseline and is recomputed against
    this one, so no old difference sits under the new header; this baseline gets none."""
    from evolvekit.report.evidence import merge_rows

    grpo = RunGroup("grpo", [_run("grpo", s, 0.1, 0.2, a) for s, a in ((0, 0.3), (1, 0.4), (2, 0.5))])
    fixed = RunGroup("fixed", [_run("fixed", s, 0.1, 0.2, a) for s, a in ((0, 0.5), (1, 0.5), (2, 0.8))])
    committed = EvidenceFile(
        family="arith", budget={}, baseline="grpo", rows=row_results([grpo, fixed], "grpo"), command="c", commit="old"
    )
    assert committed.rows["fixed"].vs_baseline["avg@4"].mean == pytest.approx(0.2)  # against grpo
    new = RunGroup("similar", [_run("similar", s, 0.1, 0.2, a) for s, a in ((0, 0.6), (1, 0.5), (2, 0.9))])
    rows = merge_rows(row_results([new], "fixed"), committed, "fixed", "new")
    assert not rows["fixed"].vs_baseline
    assert rows["grpo"].vs_baseline["avg@4"].mean == pytest.approx(-0.2)  # 0.3-0.5, 0.4-0.5, 0.5-0.8
    assert rows["similar"].vs_baseline["avg@4"].mean == pytest.approx(0.2 / 3)  # 0.1, 0, 0.1
    same = merge_rows(row_results([new], "grpo"), committed, "grpo", "new")  # the file's own baseline: kept as is
    assert same["fixed"].vs_baseline == committed.rows["fixed"].vs_baseline


def test_rows_mark_person_written_examples_from_the_runs_helper_sources():
    """A row is marked when some run's helper sources say its worked examples were a person's (the label config.py
    writes for env.worked_examples: person); the run's own examples leave it unmarked."""
    from evolvekit.report.evidence import row_results

    mine = [_run("self", s, 0.2, 0.3, 0.4) for s in (0, 1)]
    person = [_run("person", s, 0.2, 0.3, 0.6) for s in (0, 1)]
    for r in mine:
        r.helper_sources["examples"] = "self-made (env.worked_examples: self)"
    person[1].helper_sources["examples"] = "PERSON-WRITTEN (env.worked_examples: person)"
    rows = row_results([RunGroup("self", mine), RunGroup("person", person)], "self")
    assert not rows["self"].person_examples and rows["person"].person_examples


def test_the_end_line_by_hand_unfinished_rows_two_metrics_and_each_rows_commit(tmp_path):
    """comparison_line whole: a baseline row without an `after` is not finished, a named row without one is not
    shown, two metrics are parted by "; ", the named row's own commit follows the baseline's, and every budget field
    that differs is named."""
    from evolvekit.report.evidence import EvidenceFile, budget_of, comparison_line, row_results

    def run(row, seed, after):
        r = _run(row, seed, 0.1, 0.2, after)
        r.evaluations["before"]["pass@4"], r.evaluations["after"]["pass@4"] = 0.2, after + 0.1
        return r

    cfg = load_config(None, ["train.compare_row=mine"])
    base = RunGroup("grpo", [run("grpo", 0, 0.3), run("grpo", 1, 0.5)])
    ours = RunGroup("mine", [run("mine", 0, 0.4), run("mine", 1, 0.6)])
    ev = EvidenceFile(
        family="arith", budget=budget_of(cfg), baseline="grpo", rows=row_results([base, ours], "grpo"),
        command="x", commit="aaa1111",
    )  # fmt: skip
    ev.rows["mine"].commit = "bbb2222"
    path = tmp_path / "e.json"
    path.write_text(ev.model_dump_json())
    line = comparison_line(path, cfg, {})
    assert line.startswith("same family and budget, committed at aaa1111 (mine: bbb2222): avg@4: grpo "), line
    assert line.count("; ") == 1 and "; pass@4: grpo " in line
    ev.rows["mine"].commit = "aaa1111"  # the same code: said once
    path.write_text(ev.model_dump_json())
    assert comparison_line(path, cfg, {}).startswith("same family and budget, committed at aaa1111: avg@4: grpo ")
    unfinished = ev.model_copy(deep=True)
    unfinished.rows["grpo"].after = {}
    path.write_text(unfinished.model_dump_json())
    assert "avg@4: grpo not finished yet, mine (this config) " in comparison_line(path, cfg, {})
    unfinished = ev.model_copy(deep=True)
    unfinished.rows["mine"].after, unfinished.rows["mine"].commit = {}, "ccc3333"
    path.write_text(unfinished.model_dump_json())
    line = comparison_line(path, cfg, {})
    assert "this config" not in line and "ccc3333" not in line and "committed at aaa1111: " in line
    other = load_config(None, ["train.compare_row=mine", "train.iterations=2", "train.tasks_per_iteration=3"])
    path.write_text(ev.model_dump_json())
    assert comparison_line(path, other, {}).endswith(
        "not comparable (its budget differs in train.iterations, train.tasks_per_iteration)"
    )


def test_a_file_that_is_not_results_is_named_with_the_first_line_of_its_error(tmp_path):
    from evolvekit.report.evidence import comparison_line, load_evidence

    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError) as err:
        load_evidence(bad)
    first = str(err.value).splitlines()[0]
    assert len(str(err.value).splitlines()) > 1  # a many-line error: only its first line is printed
    assert comparison_line(bad, load_config(None, []), {}) == f"{bad}: not a results file ({first})"
