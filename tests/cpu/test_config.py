import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from evolvekit.config import Config, apply_override, dump_commented_yaml, load_config
from evolvekit.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_match_papers():
    cfg = Config()
    assert cfg.train.eps_low == cfg.train.eps_high == 0.28
    assert cfg.navigating.eps_high_boost == 0.6
    assert cfg.navigating.eta == 0.5 and cfg.navigating.top_k == 5 and cfg.navigating.n_pc == 4
    assert cfg.attributing.alpha == 0.1
    assert (cfg.questioning.n_breadth, cfg.questioning.n_depth) == (3, 27)
    assert cfg.questioning.lexical_dedup_threshold == 0.8
    assert cfg.navigating.theta_sim == 0.85 and cfg.navigating.theta_prune == 0.3
    assert (cfg.evolving_rl.lambda_e, cfg.evolving_rl.lambda_s, cfg.evolving_rl.entropy_coef) == (0.2, 1.0, -0.03)
    assert cfg.rollout.max_steps == 30
    assert cfg.train.kl_beta == 0.001


def _walk(model: BaseModel, prefix=""):
    for name, field in type(model).model_fields.items():
        yield prefix + name, field
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _walk(value, prefix + name + ".")


def test_every_parameter_is_documented():
    missing = [name for name, field in _walk(Config()) if name != "schema_version" and not field.description]
    assert missing == []


def test_unknown_key_names_key_and_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  learning_rat: 0.1\n")
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert "train.learning_rat" in str(err.value) and str(p) in str(err.value)


def test_wrong_type_and_missing_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("rollout:\n  max_steps: many\n")
    with pytest.raises(ConfigError, match="rollout.max_steps"):
        load_config(p)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    p.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(p)
    p.write_text("a: [unclosed\n")
    with pytest.raises(ConfigError, match="YAML"):
        load_config(p)


def test_overrides_are_typed():
    cfg = load_config(None, ["train.learning_rate=3e-4", "navigating.enabled=true", "env.backends=[MathAPI]"])
    assert cfg.train.learning_rate == pytest.approx(3e-4)
    assert cfg.navigating.enabled is True
    assert cfg.env.backends == ["MathAPI"]
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config(None, ["nonsense"])
    d = {"train": 3}
    with pytest.raises(ConfigError, match="not a section"):
        apply_override(d, "train.x=1")


def test_quickstart_is_valid_and_dump_round_trips(tmp_path):
    cfg = load_config("configs/quickstart.yaml")
    text = dump_commented_yaml(cfg)
    p = tmp_path / "dump.yaml"
    p.write_text(text)
    assert load_config(p) == cfg


def test_a_role_given_in_part_keeps_its_role_defaults(tmp_path):
    """`models.judge.max_new_tokens=64` must not move the judge off temperature 0 (nor the policy off 1.0): a
    role written in part takes the rest from its role, not from ModelConfig's generic defaults."""
    p = tmp_path / "c.yaml"
    p.write_text("models:\n  policy: {max_new_tokens: 48}\n  judge: {max_new_tokens: 64}\n")
    for cfg in (
        load_config(p),
        load_config(None, ["models.policy.max_new_tokens=48", "models.judge.max_new_tokens=64"]),
    ):
        assert (cfg.models.policy.temperature, cfg.models.policy.max_new_tokens) == (1.0, 48)
        assert (cfg.models.judge.temperature, cfg.models.judge.max_new_tokens) == (0.0, 64)
        assert cfg.models.synthesizer.max_new_tokens == 512  # an untouched role keeps all of its own
    # a value written out still wins over the role's default
    assert load_config(None, ["models.judge.temperature=0.3"]).models.judge.temperature == 0.3


def test_evidence_quickstart_rows_are_grpo_yaml_and_the_archived_oracle_main_job():
    """The figures of the earlier main job (evidence_quickstart*.md) are of exactly configs/grpo.yaml and the archived
    configs/evidence/oracle_quickstart_arith_chain.yaml (budget_of: the same family and budget), which names its use of
    person-written gold with run.oracle."""
    from evolvekit.report.ablate import load_spec
    from evolvekit.report.evidence import budget_of, comparison_line

    spec_path = Path("configs/evidence/evidence_quickstart.yaml")
    spec = load_spec(spec_path)
    rows = {row.name: row.overrides for row in spec.rows}
    archived = load_config("configs/evidence/oracle_quickstart_arith_chain.yaml")
    assert archived.run.oracle
    for name, target, extra in (
        ("grpo", load_config("configs/grpo.yaml"), []),
        ("quickstart", archived, ["run.oracle=true"]),
    ):
        cfg = load_config(
            spec_path.parent / spec.base, [*spec.budget, *rows[name], f"run.name={target.run.name}", *extra]
        )
        cfg.train.compare_with = target.train.compare_with
        cfg.run.paths_from = target.run.paths_from  # where the file's paths are read from, not a run setting
        assert cfg == target, name
        assert budget_of(cfg) == budget_of(archived)
    line = comparison_line(archived.train.compare_with or "", archived, {"avg@8": 0.0})
    assert "quickstart (this config)" in line and "20 seeds" in line and "97.5% CI" in line, line  # the committed file


def test_the_main_job_runs_on_the_environment_alone():
    """configs/quickstart.yaml: no person-written training task (λ = 1, self-questioning on), no oracle, every mechanism
    on; and the pre-registered spec's env_only row is exactly it."""
    from evolvekit.report.ablate import load_spec

    quickstart = load_config("configs/quickstart.yaml")
    assert quickstart.questioning.enabled and quickstart.questioning.hybrid_lambda == 1.0
    assert not quickstart.run.oracle and not quickstart.cold_start.enabled
    assert quickstart.navigating.enabled and quickstart.attributing.enabled
    assert quickstart.env.worked_examples == "self"  # no person-written worked example either (issue 76)
    assert quickstart.train.eval_panels == ["configs/panels/arith_panel2_v1.jsonl"]
    assert Path(quickstart.train.compare_with or "").name == "evidence_self_examples.json"
    spec_path = Path("configs/evidence/evidence_self_examples.yaml")
    spec = load_spec(spec_path)
    rows = {row.name: row.overrides for row in spec.rows}
    assert len(spec.seeds) >= 10 and spec.lift_reference == "grpo_person"
    cfg = load_config(spec_path.parent / spec.base, [*spec.budget, *rows["self_examples"]])
    cfg.train.compare_with = quickstart.train.compare_with  # presentation only: where the end line's figures are
    assert cfg == quickstart and quickstart.train.compare_row == "self_examples"
    person = load_config(spec_path.parent / spec.base, [*spec.budget, *rows["grpo_person"]])
    assert not (person.questioning.enabled or person.navigating.enabled or person.attributing.enabled)
    shown = load_config(spec_path.parent / spec.base, [*spec.budget, *rows["person_examples"]])
    assert shown.env.worked_examples == "person"
    fmt = load_config(spec_path.parent / spec.base, [*spec.budget, *rows["format_only"]])
    assert (fmt.reward.w_outcome, fmt.reward.w_format, fmt.reward.format) == (0.0, 1.0, "calls")
    assert fmt.questioning.enabled and not (fmt.navigating.enabled or fmt.attributing.enabled)


def test_the_mcp_spec_trains_on_the_server_alone_and_is_judged_on_the_committed_panel():
    """configs/evidence/evidence_mcp_fs.yaml (issue 76.5): npm's filesystem server with no person-written training task
    (no tasks file, λ = 1), the run's own worked examples, no oracle, 10 seeds; held out on the committed panel only;
    its format_only control sees nothing of whether a call was the right one."""
    from evolvekit.report.ablate import load_spec

    spec_path = Path("configs/evidence/evidence_mcp_fs.yaml")
    spec = load_spec(spec_path)
    rows = {row.name: load_config(spec_path.parent / spec.base, [*spec.budget, *row.overrides]) for row in spec.rows}
    assert set(rows) == {"self_examples", "format_only"} and len(spec.seeds) >= 10
    for cfg in rows.values():
        assert cfg.env.name == "mcp" and cfg.env.mcp.tasks_file is None and cfg.env.worked_examples == "self"
        assert cfg.questioning.enabled and cfg.questioning.hybrid_lambda == 1.0 and not cfg.run.oracle
        assert cfg.train.eval_panels == ["configs/panels/mcp_fs_panel_v1.jsonl"] and cfg.train.eval_k == 4
    main = rows["self_examples"]
    assert main.navigating.enabled and main.attributing.enabled
    fmt = rows["format_only"]
    assert (fmt.reward.w_outcome, fmt.reward.w_format) == (0.0, 1.0)
    assert not (fmt.navigating.enabled or fmt.attributing.enabled)


def test_the_fs_one_spec_is_the_main_job_on_a_second_environment():
    """configs/evidence/evidence_fs_one.yaml (issue 76.5): every row is the main job (configs/quickstart.yaml) on
    BFCL's GorillaFileSystem family fs_one with only its held-out split (48 tasks x 4) evaluated, and the rows and
    controls of evidence_self_examples, over 10 seeds."""
    from evolvekit.report.ablate import load_spec

    spec_path = Path("configs/evidence/evidence_fs_one.yaml")
    spec = load_spec(spec_path)
    main = load_spec(Path("configs/evidence/evidence_self_examples.yaml"))
    assert {r.name: r.overrides for r in spec.rows} == {r.name: r.overrides for r in main.rows}
    assert len(spec.seeds) >= 10 and spec.lift_reference == "grpo_person"
    quickstart = load_config("configs/quickstart.yaml")
    cfg = load_config(spec_path.parent / spec.base, spec.budget)
    assert (cfg.env.family, cfg.train.eval_tasks, cfg.train.eval_k, cfg.train.eval_panels) == ("fs_one", 48, 4, [])
    cfg.env.family, cfg.train.eval_tasks, cfg.train.eval_k = "arith", quickstart.train.eval_tasks, 8
    cfg.train.eval_panels, cfg.train.compare_with = quickstart.train.eval_panels, quickstart.train.compare_with
    assert cfg == quickstart  # nothing else differs from the main job


def test_evidence_quickstart_replication_repeats_the_spec_on_new_seeds():
    """The replication runs exactly the original rows and budget into the same run folder, on seeds not run before;
    the pooled file reports both sets of seeds."""
    from evolvekit.report.ablate import load_spec

    first = load_spec(Path("configs/evidence/evidence_quickstart.yaml"))
    again = load_spec(Path("configs/evidence/evidence_quickstart_replication.yaml"))
    fields = ("base", "budget", "out_dir", "rows")
    assert [getattr(again, f) for f in fields] == [getattr(first, f) for f in fields]
    assert len(again.seeds) == 10 and not set(again.seeds) & set(first.seeds)
    pooled = load_spec(Path("configs/evidence/evidence_quickstart_pooled.yaml"))
    assert [getattr(pooled, f) for f in fields] == [getattr(first, f) for f in fields]
    assert pooled.seeds == [*first.seeds, *again.seeds]
    assert pooled.confidence == 0.975 and first.confidence == again.confidence == 0.95  # the second look: 97.5%


def test_evidence_quickstart_parts_split_the_main_jobs_overrides():
    """The parts spec reuses the original's grpo and quickstart rows (same run folder and budget, its first five
    seeds), and its two new rows split the quickstart's overrides: self-questioning's settings, and the rest."""
    from evolvekit.report.ablate import load_spec

    first = load_spec(Path("configs/evidence/evidence_quickstart.yaml"))
    parts = load_spec(Path("configs/evidence/evidence_quickstart_parts.yaml"))
    assert (parts.base, parts.budget, parts.out_dir) == (first.base, first.budget, first.out_dir)
    assert set(parts.seeds) <= set(first.seeds)
    rows = {r.name: r.overrides for r in parts.rows}
    assert all(rows[r.name] == r.overrides for r in first.rows)
    questioning = [o for o in rows["quickstart"] if o.startswith(("questioning.", "models."))]
    assert rows["questioning_only"] == questioning
    assert rows["quickstart_no_questioning"] == [o for o in rows["quickstart"] if o not in questioning]


def test_ablation_confidence_out_of_range_is_a_config_error(tmp_path):
    from evolvekit.errors import ConfigError
    from evolvekit.report.ablate import load_spec

    spec = tmp_path / "a.yaml"
    spec.write_text("base: quickstart.yaml\nconfidence: 95\nrows: [{name: grpo}]\n")
    with pytest.raises(ConfigError, match="confidence"):
        load_spec(spec)


@pytest.mark.slow
@pytest.mark.parametrize(
    "content,needle", [("foo: 1\n", "unknown key 'foo'"), ("train: {iterations: x}\n", "train.iterations")]
)
def test_cli_bad_config_is_one_line(tmp_path, content, needle):
    p = tmp_path / "bad.yaml"
    p.write_text(content)
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "config", "validate", str(p)], capture_output=True, text=True
    )
    assert res.returncode != 0
    assert needle in res.stderr
    assert "Traceback" not in res.stderr
    assert len([line for line in res.stderr.splitlines() if line.strip()]) == 1


def test_co_evolution_switch_alias(tmp_path):
    from evolvekit.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("evolving_rl:\n  co_evolution: on\n  mode: solver_only\n")
    cfg = load_config(path)
    assert cfg.evolving_rl.enabled is True and cfg.evolving_rl.mode == "solver_only"
    assert load_config(None, ["evolving_rl.co_evolution=off"]).evolving_rl.enabled is False


@pytest.mark.parametrize(
    "spec", sorted(p.name for p in Path("configs/evidence").glob("*.yaml") if "rows:" in p.read_text())
)
def test_committed_ablation_specs_validate_every_row(spec):
    """Every committed ablation/evidence file names a base config and rows whose overrides `run` accepts, and each
    evidence file's budget keeps its family fixed across rows (one family per table)."""
    from evolvekit.report.ablate import load_spec

    path = Path("configs/evidence") / spec
    parsed = load_spec(path)
    families = set()
    for row in parsed.rows:
        cfg = load_config(path.parent / parsed.base, [*parsed.budget, *row.overrides, "run.seed=0"])
        families.add(cfg.env.family)
    assert len(families) == 1


def test_the_gold_table_is_oracle_and_shares_the_person_task_reference_row():
    """configs/evidence/evidence_env_only_gold.yaml: its grpo_person row is the first spec's exactly (same folder,
    budget, seeds), and every other row opens the gold through run.oracle, so its outputs say ORACLE."""
    from evolvekit.report.ablate import load_spec

    first, gold = (
        load_spec(Path("configs/evidence/evidence_env_only.yaml")),
        load_spec(Path("configs/evidence/evidence_env_only_gold.yaml")),
    )
    assert (gold.base, gold.budget, gold.out_dir, gold.seeds) == (first.base, first.budget, first.out_dir, first.seeds)
    rows = {r.name: r.overrides for r in gold.rows}
    assert rows["grpo_person"] == {r.name: r.overrides for r in first.rows}["grpo_person"]
    for name, overrides in rows.items():
        cfg = load_config(Path("configs/evidence") / gold.base, [*gold.budget, *overrides])
        assert cfg.run.oracle == (name != "grpo_person"), name
        assert not cfg.questioning.enabled  # every row trains on the person-written split
    assert Path(
        load_config(Path("configs/evidence") / gold.base, rows["sft_then_grpo"]).cold_start.tasks_file or ""
    ).is_file()


def test_gigpo_refuses_the_eq_18_to_21_fields_it_would_ignore():
    """Issue 53 (2): the gigpo branch returns before Eq. 18-21, so mode, alpha, alpha_schedule and normalization
    were silently ignored; now config refuses them, naming each."""
    from evolvekit.errors import ConfigError

    base = ["attributing.enabled=true", "attributing.source=gigpo"]
    assert load_config(None, base).attributing.source == "gigpo"
    for extra, name in (
        ("attributing.alpha=0.3", "attributing.alpha"),
        ("attributing.mode=attribution_only", "attributing.mode"),
        ("attributing.normalization=step", "attributing.normalization"),
        ("attributing.alpha_schedule=[0.1,0.2]", "attributing.alpha_schedule"),
    ):
        with pytest.raises(ConfigError, match=name):
            load_config(None, [*base, extra])


@pytest.mark.slow
def test_config_show_marks_every_departure_from_the_papers_and_each_is_explained():
    """Issue 53 (6): paper defaults changed without a word. `config show` marks each departure; every shipped
    config says why on the line; docs/training.md's table lists the defaults' and the quickstart's."""
    import re
    import subprocess
    import sys

    from evolvekit.config import PAPER_VALUES, Config, paper_departures

    assert paper_departures(Config()) == {
        "train.tasks_per_iteration": (4, 32, "§7.1.3, batch size 32"),
        "train.ppo_epochs": (1, 40, "§7.1.3, 40 epochs per policy update"),
    }
    quick = paper_departures(load_config("configs/quickstart.yaml"))
    assert set(quick) >= {"models.explorer.temperature", "questioning.difficulty.operations", "train.learning_rate"}
    shown = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "config", "show", "configs/quickstart.yaml"],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    assert f"# {len(quick)} values differ from the papers'" in shown
    assert "operations: 1  # ≠ paper: 3 (§7.1.3)" in shown and "eta: 0.5  #" not in shown
    docs = Path("docs/training.md").read_text()
    for dotted in set(quick) | {"train.tasks_per_iteration", "train.ppo_epochs"}:
        assert f"| `{dotted}` |" in docs, dotted
    for shipped in (
        "quickstart",
        "grpo",
        "evidence/oracle_quickstart_arith_chain",
        "mcp_filesystem",
        "mcp_git",
        "questioning_bfcl",
    ):
        text = Path(f"configs/{shipped}.yaml").read_text().splitlines()
        for dotted in paper_departures(load_config(f"configs/{shipped}.yaml")):
            leaf = dotted.rsplit(".", 1)[-1]
            lines = [ln for ln in text if re.match(rf"\s*{leaf}:", ln)]
            assert any("paper" in ln for ln in lines), (shipped, dotted)
    assert all(isinstance(src, str) and src for _, src in PAPER_VALUES.values())


@pytest.mark.slow
def test_defaults_that_follow_from_other_settings_are_marked_not_silent():
    """Issue 55: config.py rewrote defaults silently (w_reasoning with the reasoning template, w_format and format
    with as_tool, Evolving-RL's train settings). Each applies only to a field the config leaves unset, and `config
    show` marks it with its rule."""
    import subprocess
    import sys

    from evolvekit.config import dump_commented_yaml

    cfg = load_config(None, ["evolving_rl.enabled=true", "train.kl_beta=0.02"])
    assert "train.kl_beta" not in cfg._derived and cfg.train.kl_beta == 0.02  # set by the user: not a rule's
    assert cfg._derived["train.eps_low"].startswith("evolving_rl.enabled") and cfg.train.eps_low == 0.1
    text = dump_commented_yaml(cfg)
    # Evolving-RL's own values are its paper's (MODE_PAPER_VALUES): set by its rule, no departure
    assert "eps_low: 0.1  # set by evolving_rl.enabled" in text
    assert (
        "kl_beta: 0.02  # ≠ paper: 0.01 (Evolving-RL Table 5)" in text
        and "kl_beta: 0.02  # ≠ paper: 0.01 (Evolving-RL Table 5)  # set by" not in text
    )
    tool = load_config(None, ["navigating.enabled=true", "navigating.as_tool=true"])
    assert set(tool._derived) == {"reward.w_format", "reward.format"}
    assert load_config(None, [])._derived == {}
    shown = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "config", "show", "--set", "rollout.template=reasoning"],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    assert "# 1 values follow from other settings (marked 'set by'): reward.w_reasoning" in shown


def test_the_extending_papers_values_are_flagged_in_their_mode():
    """Issue 77.3: EvolveR's clip 0.2, top-p 0.95 and distill temperature 1, Evolving-RL's top-p 0.9, CoEvolve's
    rollout temperature 0.9 and 100 initial tasks are departures only for a run in that paper's mode."""
    from evolvekit.config import paper_departures

    plain = paper_departures(load_config(None, []))
    assert not {"models.policy.top_p", "train.eps_low", "models.summarizer.temperature"} & set(plain)
    evolver = paper_departures(load_config(None, ["navigating.enabled=true", "navigating.as_tool=true"]))
    assert evolver["train.eps_low"] == (0.28, 0.2, "EvolveR A.2, GRPO clip ε = 0.2")
    assert evolver["models.policy.top_p"][:2] == (1.0, 0.95)
    assert evolver["models.summarizer.temperature"][1] == 1.0
    evolving = paper_departures(load_config(None, ["evolving_rl.enabled=true"]))
    assert evolving["models.policy.top_p"][:2] == (1.0, 0.9) and "train.eps_low" not in evolving  # its rule sets 0.1
    coevolve = paper_departures(load_config(None, ["coevolve.enabled=true", "questioning.enabled=true"]))
    assert coevolve["models.policy.temperature"][1] == 0.9 and coevolve["questioning.synthetic_tasks"][:2] == (64, 100)
    text = dump_commented_yaml(load_config(None, ["navigating.enabled=true", "navigating.as_tool=true"]))
    assert "eps_low: 0.28  # ≠ paper: 0.2 (EvolveR A.2, GRPO clip ε = 0.2)" in text


@pytest.mark.parametrize(
    "sets",
    [
        ["train.advantage_estimator=gigpo", "attributing.mode=outcome_only", "attributing.alpha=0.5"],
        ["attributing.enabled=true", "attributing.mode=outcome_only", "attributing.alpha=0.3"],
        ["train.advantage_estimator=grpo", "attributing.alpha_schedule=[0.1, 0.2]"],
    ],
)
def test_an_alpha_nothing_uses_is_refused_not_ignored(sets):
    """Issue 77.4: gigpo (or GRPO, or mode outcome_only) has no attribution channel; a changed α was ignored."""
    with pytest.raises(ConfigError, match="attributing.alpha.*would be ignored"):
        load_config(None, sets)
    load_config(None, ["attributing.enabled=true", "attributing.alpha=0.5"])  # dual_channel uses it


# AgentEvolver's stated values, written from the paper's text (§7.1.1, §7.1.3, §7.5, Eq. 12) and EvolveR's k_e, each
# with the words it rests on; config.PAPER_VALUES (what `config show` flags departures against) must say the same
_FROM_THE_PAPERS = {
    "train.learning_rate": 1e-6,  # "a learning rate of 1 x 10^-6"
    "train.tasks_per_iteration": 32,  # "a batch size of 32"
    "train.ppo_epochs": 40,  # "40 epochs per policy update"
    "train.kl_beta": 0.001,  # "The KL penalty coefficient is 0.001"
    "train.eps_low": 0.28,  # "clipped at eps_low = eps_high = 0.28"
    "train.eps_high": 0.28,
    "navigating.eps_high_boost": 0.6,  # "with an extended bound eps_high^ = 0.6"
    "navigating.n_pc": 4,  # "we set N_pc = 4"
    "navigating.top_k": 5,  # "TopK parameter as k = 5"
    "navigating.eta": 0.5,  # "is set to eta = 0.5"
    "navigating.search_k": 3,  # EvolveR: "the top-k_e = 3 principles"
    "rollout.max_steps": 30,  # §7.1.1: "truncated at a maximum of 30 steps"
    "rollout.group_size": 8,  # §7.1.1: "avg@8, averaging TGC over 8 independent rollouts"
    "models.explorer.temperature": 1.0,  # "the sampling temperature is set to 1"
    "questioning.n_breadth": 3,  # "For BFCL, N_b = 3 and N_d = 27"
    "questioning.n_depth": 27,
    "questioning.explore_steps": 30,  # N_b + N_d
    "questioning.difficulty.entities": 2,  # "two entities, three attributes, and three operations"
    "questioning.difficulty.attributes": 3,
    "questioning.difficulty.operations": 3,
    "questioning.lexical_dedup_threshold": 0.8,  # "the lexical deduplication similarity threshold to 0.8"
    "questioning.synthetic_advantage_decay": 0.5,  # "downscale advantages from p_train by a decay factor 0.5"
    "questioning.hybrid_lambda": 1.0,  # Eq. 12: synthetic tasks alone by default
    "attributing.alpha": 0.1,  # §7.5: "alpha = 0.10", in "the optimal range [0.10, 0.20]"
    "navigating.rerank": True,  # §4.1: "refined through a module Omega_refine, which performs (1) re-ranking"
    "navigating.rewrite": True,  # "... and (2) re-writing"
}


def test_the_departures_table_says_what_the_papers_say():
    """config.PAPER_VALUES against a table written from the papers' text: a value changed in the table `config show`
    flags against fails here (benchmarks/audits/hand_mutants.py)."""
    from evolvekit.config import PAPER_VALUES

    assert {k: v for k, (v, _source) in PAPER_VALUES.items()} == _FROM_THE_PAPERS


@pytest.mark.parametrize(
    "section, values, says",
    [
        ("train", {"sharding": "fsdp2", "lora": True}, "train.sharding: fsdp2 shards the full model"),
        ("rollout", {"backend": "ray", "template": "self_managing"}, "rollout.backend: ray with rollout.template"),
        ("questioning", {"pass_filter_samples": 1}, "questioning.pass_filter_samples: 1 attempt"),
        ("questioning", {"difficulty": {"chained": True, "turns": 2}}, "questioning.difficulty.chained writes"),
        ("attributing", {"source": "gigpo", "alpha": 0.3}, "attributing.source: gigpo computes its own"),
        ("env", {"name": "openenv"}, "env.openenv.url: env.name openenv needs"),
    ],
)
def test_a_rule_over_one_sections_fields_lives_beside_them_and_config_validation_asks_it(section, values, says):
    """Issue 79.4: the rules that combine one section's fields are that section's ``problem()``; the whole config's
    validation (what `run` and `config validate` load) reports the same line."""
    from evolvekit.config import Config, config_from_dict
    from evolvekit.errors import ConfigError

    part = type(getattr(Config(), section)).model_validate(values)
    assert (part.problem() or "").startswith(says)
    with pytest.raises(ConfigError, match=re.escape(says)):
        config_from_dict({section: values})


def _numeric(annotation) -> bool:
    import types
    import typing

    if annotation in (int, float):
        return True
    args = typing.get_args(annotation)
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return union and any(a in (int, float) for a in args)


def _sections(annotation) -> list:
    import typing

    from pydantic import BaseModel

    found = [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []
    for a in typing.get_args(annotation):
        found += _sections(a)
    return found


def _unbounded(model, prefix: str = "") -> list[str]:
    """Every numeric field of the schema under ``model`` without an upper or a lower bound, by dotted name."""
    import annotated_types as at

    out = []
    for name, field in model.model_fields.items():
        if _numeric(field.annotation):
            upper = any(isinstance(m, (at.Le, at.Lt)) for m in field.metadata)
            lower = any(isinstance(m, (at.Ge, at.Gt)) for m in field.metadata)
            out += [f"{prefix}{name}"] if not (upper and lower) else []
        for section in _sections(field.annotation):
            out += _unbounded(section, f"{prefix}{name}.")
    return out


def test_every_numeric_setting_has_an_upper_and_a_lower_bound():
    """Issue 99.2: a walk of the whole config schema finds no number field without both bounds."""
    from pydantic import BaseModel

    from evolvekit.config import Config, F

    assert _unbounded(Config) == []

    class Loose(BaseModel):  # the walk sees a missing bound, nested and optional too
        n: int = F(1, "n", ge=0)
        x: float | None = F(None, "x", le=1)

    class Outer(BaseModel):
        inner: Loose = F(Loose(), "inner")

    assert _unbounded(Outer) == ["inner.n", "inner.x"]


@pytest.mark.parametrize(
    "setting, bound",
    [
        ("models.policy.max_new_tokens=2000000", "1048576"),
        ("questioning.synthetic_tasks=1000000000", "100000"),
        ("reward.w_format=1e308", "1000"),
        ("models.policy.timeout_s=1e308", "86400"),
    ],
)
def test_a_number_past_its_bound_is_refused_naming_the_field_and_the_bound(setting: str, bound: str):
    """Issue 99.2's probes: each started a run before; now `config validate` (as `run`) exits 2 with one line."""
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "config", "validate", "configs/quickstart.yaml", "--set", setting],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    field = setting.split("=")[0]
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"'{field}'" in res.stderr and bound in res.stderr


@pytest.mark.parametrize("name", ["run\x1b[2J", "s\u202eevas", "zero\u200bwidth", "tab\there", "x" * 201])
def test_a_run_name_with_control_or_invisible_characters_is_refused(name: str):
    """Issue 99.8: `run.name` accepts printable characters only (its folder is listed, logged and printed)."""
    with pytest.raises(ConfigError, match="run.name.*printable"):
        load_config(None, [f"run.name={name}"])
    assert load_config(None, ["run.name=évolution 2"]).run.name == "évolution 2"


@pytest.mark.parametrize(
    "enabled, lam, real, synthetic",
    [(False, 1.0, True, False), (False, 0.5, True, False), (True, 1.0, False, True), (True, 0.5, True, True),
     (True, 0.0, True, False)],
)  # fmt: skip
def test_what_hybrid_lambda_decides_is_said_in_one_place(enabled: bool, lam: float, real: bool, synthetic: bool):
    """Issue 98.2: Eq. 12's λ decides whether person-written or synthesized tasks (or both) are trained on; every
    reader asks QuestioningConfig, not its own comparison."""
    from evolvekit.config import QuestioningConfig

    q = QuestioningConfig(enabled=enabled, hybrid_lambda=lam)
    assert (q.trains_on_real, q.trains_on_synthetic) == (real, synthetic)
