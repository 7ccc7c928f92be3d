"""Mutation testing of the mechanism modules (issue 53): mutmut mutates one module at a time in a fresh copy of the
checkout and runs that module's fast tests; a surviving mutant is a change no test notices.

    .venv/bin/pip install -e '.[mutation]' -c constraints.txt    # mutmut, pinned (not installed by setup.sh)
    nice .venv/bin/python benchmarks/audits/mutation.py [--only losses credit ...] > runs/mutation.log 2>&1 &

Writes benchmarks/results/mutation.md (and .json): per module the mutants, killed, survived and timed-out ones, the
score, and every survivor's name (``mutmut show <name>`` in that module's copy prints its diff; the copies stay under
runs/mutation/<module>). Run it in the background, alone on the machine, never in CI. An unfinished look goes on
with ``--resume``; ``--save-verdicts --only <module>`` writes its verdicts to benchmarks/results/mutation_verdicts/,
to be committed, and a ``--resume`` on a machine without the copy starts from them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the tests of the composition root and the parts it connects
_BUILD_TESTS = (
    ["tests/cpu/test_build_wiring.py", "tests/cpu/test_parts.py", "tests/cpu/test_coevolve.py"]
    + [
        "tests/cpu/test_advantages.py",
        "tests/cpu/test_boundary.py",
        "tests/cpu/test_questioning.py",
        "tests/cpu/test_navigating.py",
    ]
    + ["tests/cpu/test_attributing.py", "tests/cpu/test_run_loop.py"]
    + ["tests/cpu/test_families.py", "tests/cpu/test_store.py", "tests/cpu/test_agent.py"]
    + [
        "tests/cpu/test_gigpo.py",
        "tests/cpu/test_cold_start.py",
        "tests/cpu/test_templates.py",
        "tests/cpu/test_templates_pure.py",
    ]
)

# module (under src/evolvekit) -> the fast tests that exercise it
MODULES: dict[str, tuple[str, list[str]]] = {
    "losses": ("train/losses.py", ["tests/cpu/test_losses.py", "tests/cpu/test_attributing.py"]),
    "samples": ("train/samples.py", ["tests/cpu/test_samples.py", "tests/cpu/test_templates.py"]),
    "credit": ("attributing/credit.py", ["tests/cpu/test_attributing.py"]),
    "grounded": ("attributing/grounded.py", ["tests/cpu/test_grounded.py", "tests/cpu/test_attributing.py"]),
    "gigpo": ("attributing/gigpo.py", ["tests/cpu/test_gigpo.py"]),
    "coevolve": ("questioning/coevolve.py", ["tests/cpu/test_coevolve.py", "tests/cpu/test_questioning.py"]),
    "pool": ("navigating/pool.py", ["tests/cpu/test_pool.py", "tests/cpu/test_navigating.py"]),
    "rewards": ("train/rewards.py", ["tests/cpu/test_rewards.py", "tests/cpu/test_templates.py"]),
    # the registered advantage estimators and step-credit sources (issue 55's registries), the LLM attributor
    "advantages": ("train/advantages.py", ["tests/cpu/test_advantages.py"]),
    "estimators": ("attributing/estimators.py", ["tests/cpu/test_estimators.py", "tests/cpu/test_advantages.py"]),
    "sources": ("attributing/sources.py", ["tests/cpu/test_estimators.py", "tests/cpu/test_advantages.py"]),
    "attributor": ("attributing/attributor.py", ["tests/cpu/test_attributor.py", "tests/cpu/test_attributing.py"]),
    # issue 52: the file system's leaves kept per writing call (exactness against the plain walk)
    "fs_leaves": ("env/bfcl/fs_leaves.py", ["tests/cpu/test_bfcl_fs_leaves.py"]),
    # the cold start (EvolveR's SFT warm-up), with its shared-prefix batch since 2026-11-28
    "sft": ("train/sft.py", ["tests/cpu/test_cold_start.py"]),
    # self-navigating's stages (AgentEvolver §4): Eq. 15's guided share, Eq. 13's cold start, summarisation (C)
    "navstage": (
        "navigating/stage.py",
        ["tests/cpu/test_navigating_stage.py", "tests/cpu/test_navigating.py", "tests/cpu/test_store.py"]
        + ["tests/cpu/test_build_wiring.py"],
    ),
    # task curation (AgentEvolver §3.3): dedup, the feasibility replay, and evolvekit's grounding checks
    "curate": (
        "questioning/curate.py",
        ["tests/cpu/test_curate.py", "tests/cpu/test_questioning.py", "tests/cpu/test_synthesis_turns.py"],
    ),
    # experience extraction (Ω_process, §4.1 / EvolveR): the split into jobs, grounded writing, validation, refine
    "extract": (
        "navigating/extract.py",
        ["tests/cpu/test_extract.py", "tests/cpu/test_navigating.py", "tests/cpu/test_helpers_constrained.py"]
        + ["tests/cpu/test_boundary.py"],
    ),
    # the task supply (Eq. 12's hybrid λ, the proxy tasks' advantage decay, CoEvolve's hook)
    "supply": (
        "questioning/supply.py",
        ["tests/cpu/test_supply.py", "tests/cpu/test_questioning.py", "tests/cpu/test_build_wiring.py"],
    ),
    # self-attributing's stage (§5): grounded labels behind the information boundary, self-derived and borrowed
    # references, the source's agreement with the grounded labels
    "attrstage": (
        "attributing/stage.py",
        ["tests/cpu/test_attributing_stage.py", "tests/cpu/test_attributing.py", "tests/cpu/test_grounded.py"]
        + ["tests/cpu/test_boundary.py", "tests/cpu/test_advantages.py", "tests/cpu/test_build_wiring.py"],
    ),
    # Evolving-RL's utility test of an experience (§3.1): related tasks by description, utility vs. vanilla
    "utility": ("navigating/utility.py", ["tests/cpu/test_utility.py", "tests/cpu/test_navigating.py"]),
    # the LLM judge (§3.3) and its agreement with the environment's state
    "judge": (
        "questioning/judge.py",
        ["tests/cpu/test_judge.py", "tests/cpu/test_questioning.py", "tests/cpu/test_helpers_constrained.py"]
        + ["tests/cpu/test_build_wiring.py"],
    ),
    # Evolving-RL's math (§3, Appendix A): skill rewards, the two groupings, the skill filter, Eq. 7-10's reliability
    "evolvingrl": ("navigating/evolving_rl.py", ["tests/cpu/test_evolving_rl.py"]),
    # Evolving-RL's stages (§3.1-3.4): source, extractor and solver rollouts, the kept skills, the joint samples
    "evolvstage": (
        "navigating/evolving_stage.py",
        ["tests/cpu/test_evolving_stage.py", "tests/cpu/test_evolving_rl.py", "tests/cpu/test_build_wiring.py"],
    ),
    # the training loop itself (issue 77.2): the synthesized tasks' judge rewards (§3.3), EvolveR's search action,
    # the outcome-only sample stage
    "reward": ("questioning/reward.py", ["tests/cpu/test_questioning.py"]),
    "tool_env": ("navigating/tool_env.py", ["tests/cpu/test_navigating.py"]),
    "sample_stage": ("train/sample_stage.py", ["tests/cpu/test_advantages.py", "tests/cpu/test_attributing_stage.py"]),
    # the episode loop (the anchor key, tool-use credit), the context templates, held-out evaluation
    "rollout": (
        "agent/rollout.py",
        ["tests/cpu/test_rollout_pure.py", "tests/cpu/test_agent.py", "tests/cpu/test_templates.py"]
        + ["tests/cpu/test_gigpo.py"],
    ),
    "templates": ("agent/templates.py", ["tests/cpu/test_templates_pure.py", "tests/cpu/test_templates.py"]),
    "evaluate": (
        "agent/evaluate.py",
        ["tests/cpu/test_evaluate_pure.py", "tests/cpu/test_agent.py", "tests/cpu/test_worked_examples.py"],
    ),
    # the update (Eq. 17's loss over micro-batches, the KL reference, master weights) and the policy it steps
    "trainer": ("train/trainer.py", ["tests/cpu/test_trainer.py", "tests/cpu/test_master_weights.py"]),
    "policy": (
        "train/policy.py",
        ["tests/cpu/test_policy.py", "tests/cpu/test_master_weights.py", "tests/cpu/test_trainer.py"],
    ),
    # the master loop and the synthesis pipeline's rounds
    "loop": (
        "orchestrator/loop.py",
        ["tests/cpu/test_loop_stages.py", "tests/cpu/test_run_loop.py", "tests/cpu/test_questioning.py"],
    ),
    "pipeline": (
        "questioning/pipeline.py",
        ["tests/cpu/test_pipeline_pure.py", "tests/cpu/test_questioning.py", "tests/cpu/test_synthesis_turns.py"]
        + ["tests/cpu/test_curate.py"],
    ),
    # curiosity-driven exploration (§3.1-3.2): environment profiles, the explorer's prompts and traces
    # the row is against test_explore.py alone (stop 70); test_questioning.py reaches more, at ~8 s a mutant
    "explore": ("questioning/explore.py", ["tests/cpu/test_explore.py", "tests/cpu/test_questioning.py"]),
    # task synthesis with reference solutions (§3.2-3.3)
    "synthesize": (
        "questioning/synthesize.py",
        ["tests/cpu/test_synthesize.py", "tests/cpu/test_questioning.py", "tests/cpu/test_synthesis_turns.py"],
    ),
    # the context manager's snapshot recorder (§6.2): merged sequences, loss mask, step spans, prompt spans
    "context": (
        "agent/context.py",
        [
            "tests/cpu/test_context.py",
            "tests/cpu/test_agent.py",
            "tests/cpu/test_samples.py",
            "tests/cpu/test_templates.py",
        ],
    ),
    # the evidence statistics every learning claim rests on: t intervals, the exact sign-flip test, the share of seeds
    # that improve, the recovered share, run health, the rows' merge with committed results
    "evidence": ("report/evidence.py", ["tests/cpu/test_evidence.py"]),
    # the two leaf modules outside input passes through (hostile input): linear JSON checks and the task-file reader,
    # and every outbound client's deadline, size cap and shallow-JSON reply
    "safejson": (
        "safejson.py",
        ["tests/cpu/test_safe_io.py", "tests/cpu/test_hostile.py", "tests/cpu/test_hostile_cli.py"],
    ),
    "bounded_http": (
        "bounded_http.py",
        ["tests/cpu/test_safe_io.py", "tests/cpu/test_hostile.py", "tests/cpu/test_hostile_cli.py"],
    ),
    # every `auto` of a config resolved in one place, with its reason (issue 55.5): what `config show` prints
    "resolve": ("resolve.py", ["tests/cpu/test_resolve.py"]),
    # the stage wiring of the orchestrator's builder (the run folder is orchestrator/run_dir.py since 47200ad)
    "build": ("orchestrator/build.py", _BUILD_TESTS),
    # the parts the composition root connects (issue 79.1), each its package's factory, against the same tests
    **{
        f"parts_{pkg}": (f"{pkg}/parts.py", _BUILD_TESTS)
        for pkg in ("agent", "train", "questioning", "navigating", "attributing")
    },
    # rollout engines by name (issue 79.2): the rules run and config validate ask, config show's settings, the builder
    "engine_registry": (
        "engine/registry.py",
        ["tests/cpu/test_engine_registry.py", "tests/cpu/test_vllm_engine_seam.py", "tests/cpu/test_sglang_engine.py"]
        + ["tests/cpu/test_parts.py", "tests/cpu/test_config_show.py", "tests/cpu/test_engine_parity.py"],
    ),
}


# a registration decorator on a module-level function: ``@register_step_credit("grounded")`` above ``def name(``
_REGISTRATION = re.compile(r"^@(register_\w+\([^)\n]*\))\n(def (\w+)\()", re.MULTILINE)


def undecorate_registrations(text: str) -> str:
    """The module with each registration decorator turned into a call after the definitions (``name =
    register_x("n")(name)`` at the end), the same registrations in the same order. mutmut 3 does not mutate a
    decorated function; in the copy it mutates this form, so the registered functions themselves are mutated."""
    calls = [f"{m.group(3)} = {m.group(1)}({m.group(3)})" for m in _REGISTRATION.finditer(text)]
    if not calls:
        return text
    body = _REGISTRATION.sub(lambda m: m.group(2), text)
    tail = "\n\n\n# registrations (benchmarks/audits/mutation.py: undecorate_registrations)\n" + "\n".join(calls) + "\n"
    return body.rstrip("\n") + tail


def copy_checkout(dest: Path, keep_verdicts: bool = False) -> None:
    """The committed tree (``git archive HEAD``), with this checkout's virtual environment linked in.
    ``keep_verdicts``: an existing copy keeps mutmut's ``mutants/`` folder (its verdicts) and gets HEAD's files
    written over its own."""
    if dest.exists() and not keep_verdicts:
        shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    if not (dest / ".venv").is_symlink():
        (dest / ".venv").symlink_to(ROOT / ".venv")


# mutmut's exit codes of a mutant's test run: 0 = every test passed (survived); 1 = a test failed (killed)
_SURVIVED = 0


def reopen_verdicts(meta: Path, recheck: tuple[str, ...] = (), reopen: tuple[str, ...] | None = None) -> dict[str, int]:
    """A resumed look (``--resume``): in mutmut's verdict file of the module, every survivor and every mutant that
    was not killed outright (a timeout, a crash) is made undecided again, so the tests as they are now meet it; a kill
    (exit code 1) stands, unless its function's mangled name starts with one of ``recheck`` (a function whose tests
    lost an assertion since). ``reopen``: only the survivors whose names start with one of these are made undecided
    (the tests added since aim at them); the other survivors keep their verdict, which only tests added since could
    change, so the score stays a lower bound. mutmut itself re-tests the functions whose source changed (its hashes).
    Returns the counts: kept kills, kept survivors, reopened."""
    data = json.loads(meta.read_text())
    codes = data["exit_code_by_key"]
    kept = kept_survivors = reopened = 0
    for key, code in codes.items():
        if code is None:
            continue
        if code == 1 and not key.startswith(recheck):
            kept += 1
            continue
        if code == _SURVIVED and reopen is not None and not key.startswith(reopen):
            kept_survivors += 1
            continue
        codes[key] = None
        reopened += 1
    meta.write_text(json.dumps(data))
    return {"kept_kills": kept, "kept_survivors": kept_survivors, "reopened": reopened}


# a look's verdicts, committed (``--save-verdicts``), so that a later session on a machine without the copy resumes it
VERDICTS = ROOT / "benchmarks" / "results" / "mutation_verdicts"


def seed_verdicts(meta: Path, saved: Path) -> bool:
    """A copy without mutmut's verdict file gets the committed one (``saved``), so ``--resume`` goes on where that look
    stopped: mutmut keeps the verdict of every mutant whose function's source hash is unchanged and re-tests the rest.
    Returns whether it seeded (never over a copy's own verdicts)."""
    if meta.is_file() or not saved.is_file():
        return False
    meta.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(saved, meta)
    return True


def save_verdicts(meta: Path, saved: Path) -> dict[str, int]:
    """mutmut's verdict file of a copy written where it is committed (``saved``); the counts by verdict: killed (exit
    code 1), survived (0), open (not run yet) and other (timeouts, crashes)."""
    data = json.loads(meta.read_text())
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(data, sort_keys=True, indent=0) + "\n")
    codes = list(data["exit_code_by_key"].values())
    return {
        "killed": codes.count(1),
        "survived": codes.count(0),
        "open": codes.count(None),
        "other": sum(c not in (0, 1, None) for c in codes),
    }


def mutate(
    name: str,
    module: str,
    tests: list[str],
    work: Path,
    timeout_multiplier: float = 15.0,
    recheck_limit_s: float = 600,
    timeout_constant: float = 1.0,
    resume: bool = False,
    recheck: tuple[str, ...] = (),
    reopen: tuple[str, ...] | None = None,
) -> dict:
    """mutmut on one module in its own copy; its counts and survivors. ``timeout_multiplier``: mutmut's (a mutant
    times out, and counts as killed, past about 2 x multiplier x its tests' usual time; mutmut's default 15).
    ``resume``: go on with the copy's earlier, unfinished look (``reopen_verdicts``; ``recheck``, ``reopen``: its
    arguments)."""
    copy = work / name
    meta = copy / "mutants" / "src" / "evolvekit" / (module + ".meta")
    if resume and seed_verdicts(meta, VERDICTS / f"{name}.json"):
        print(f"{name}: the copy had no verdicts; seeded from {VERDICTS / f'{name}.json'}", flush=True)
    resumed = resume and meta.is_file()
    copy_checkout(copy, keep_verdicts=resumed)
    if resumed:
        print(f"{name}: resuming the look in {copy}: {reopen_verdicts(meta, recheck, reopen)}", flush=True)
        # mutmut collects which tests reach each function only for tests it has not seen: a test changed since the
        # last look (a new call path) would stay mapped to what it reached then, and the mutants of the functions it
        # reaches now would not meet it. Collected again, for every test as it is now.
        (copy / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    source = copy / "src" / "evolvekit" / module
    source.write_text(undecorate_registrations(source.read_text()))
    with open(copy / "pyproject.toml", "a", encoding="utf-8") as fh:
        fh.write(
            "\n[tool.mutmut]\n"
            'source_paths = ["src/evolvekit/"]\n'
            f'only_mutate = ["src/evolvekit/{module}"]\n'
            f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
            # the fast tier only (since 2026-11-27; earlier rows ran slow tests too): a mutant only a slow test
            # catches counts as a survivor
            'pytest_add_cli_args = ["-p", "no:cacheprovider", "-x", "-q", "-o", "addopts=", "-m", "not slow"]\n'
            'also_copy = ["configs/", "examples/", "docs/"]\n'  # what tests read by path (examples, docs' counts)
            f"timeout_multiplier = {timeout_multiplier}\n"
            f"timeout_constant = {timeout_constant}\n"
            # workers forked from a server that has imported the tests but run no torch: a fork after torch has run
            # deadlocks (mutmut's own advice for torch; the default forks from the process that ran the suite)
            'process_isolation = "forkserver"\n'
        )
    env = {**os.environ, "PYTHONPATH": str(copy / "src")}
    mutmut = str(ROOT / ".venv" / "bin" / "mutmut")
    t0 = time.perf_counter()
    with open(copy / "mutmut.log", "w") as log:
        subprocess.run([mutmut, "run", "--max-children", "2"], cwd=copy, env=env, stdout=log, stderr=log)
    subprocess.run([mutmut, "export-cicd-stats"], cwd=copy, env=env, capture_output=True)
    if "failed to collect stats" in (copy / "mutmut.log").read_text(errors="replace"):
        raise SystemExit(f"{name}: the tests fail before any mutant (see {copy / 'mutmut.log'}); no row written")
    stats_file = copy / "mutants" / "mutmut-cicd-stats.json"
    stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {}
    results = subprocess.run([mutmut, "results"], cwd=copy, env=env, capture_output=True, text=True).stdout
    survivors = [line.split(":")[0].strip() for line in results.splitlines() if line.strip().endswith("survived")]
    timed_out = [line.split(":")[0].strip() for line in results.splitlines() if line.strip().endswith("timeout")]
    # a mutmut timeout is not taken as a kill: each is run again directly (recheck_timeouts)
    verdicts = recheck_timeouts(copy, tests, timed_out, recheck_limit_s)
    survivors += [n for n, v in verdicts.items() if v == "survived"]
    n_killed = int(stats.get("killed", 0)) + sum(v == "killed" for v in verdicts.values())
    n_timeout = sum(v == "timeout" for v in verdicts.values())
    n_survived = int(stats.get("survived", 0)) + sum(v == "survived" for v in verdicts.values())
    total = int(stats.get("total", 0))
    killed = n_killed + n_timeout
    # mutants mutmut could not check (inside a decorated function, or code that runs at import) are in no category
    checked = killed + n_survived + int(stats.get("no_tests", 0))
    return {
        "module": f"src/evolvekit/{module}",
        "tests": tests,
        "total": total,
        "killed": n_killed,
        "timeout": n_timeout,
        "survived": n_survived,
        "no_tests": int(stats.get("no_tests", 0)),
        "mutmut_timeouts_rechecked": len(timed_out),
        "score": killed / checked if checked else None,
        "seconds": round(time.perf_counter() - t0, 1),
        "timeout_multiplier": timeout_multiplier,
        "timeout_constant": timeout_constant,
        "resumed": resumed,
        "survivors": survivors,
    }


# the resident memory one direct recheck may take (measured: a mutant that never ends an episode grew to 17 GiB on a
# 24 GiB machine in 3 minutes, beside an evidence run; the suite's own tests stay under 2 GiB); past it, killed
RECHECK_MEMORY_BYTES = 4 * 2**30


def _resident_bytes(pid: int) -> int:
    """The process's resident memory (0 once it has gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) * 1024 if found else 0


def _run_capped(args: list[str], cwd: Path, env: dict, limit_s: float) -> str:
    """One direct run of a mutant's tests: ``survived`` (they passed), ``killed`` (one failed, or the run grew past
    RECHECK_MEMORY_BYTES resident: a mutant that never ends a loop can grow without bound, and is stopped there as it
    would be by a hang), or ``timeout`` (past ``limit_s``)."""
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    while proc.poll() is None:
        if _resident_bytes(proc.pid) > RECHECK_MEMORY_BYTES:
            proc.kill()
            proc.wait()
            return "killed"
        if time.monotonic() - t0 > limit_s:
            proc.kill()
            proc.wait()
            return "timeout"
        time.sleep(0.5)
    return "survived" if proc.returncode == 0 else "killed"


def _rank(tests: list[str], test_id: str) -> int:
    """Where a covering test's file stands among the row's test files (mutmut names tests ``path::name``)."""
    path = test_id.split("::", 1)[0]
    return next((i for i, t in enumerate(tests) if path.endswith(t)), len(tests))


def recheck_timeouts(copy: Path, tests: list[str], names: list[str], limit_s: float) -> dict[str, str]:
    """Each mutant mutmut timed out, run again directly: the module's tests in one pytest process with the mutant
    switched on (``MUTANT_UNDER_TEST``), no fork. mutmut runs tests in processes forked from one that has run torch,
    and there a test that computes with torch can hang however small the mutant (measured: a metrics-name mutant
    of attributor.py that fails its test in 3 s directly was a mutmut timeout). The tests are those mutmut found
    covering the mutant's function (its stats), else ``tests``. Per mutant: ``killed`` (a test failed, or the mutant
    broke import), ``survived`` (every test passed) or ``timeout`` (still past ``limit_s``)."""
    env = {**os.environ, "PYTHONPATH": str(copy / "mutants" / "src")}
    args = [str(ROOT / ".venv" / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q"]
    args += ["-o", "addopts=", "-m", "not slow"]
    stats = copy / "mutants" / "mutmut-stats.json"  # the tests mutmut found covering each function, when it has them
    covering = json.loads(stats.read_text()).get("tests_by_mangled_function_name", {}) if stats.is_file() else {}
    verdicts = {}
    for name in names:
        # in the row's order of test files (its fast, model-free files first), so a quick failure comes first
        selected = sorted(covering.get(name.rsplit("__mutmut_", 1)[0], []), key=lambda t: (_rank(tests, t), t)) or tests
        verdicts[name] = _run_capped([*args, *selected], copy / "mutants", {**env, "MUTANT_UNDER_TEST": name}, limit_s)
    return verdicts


def write_report(rows: list[dict], out: Path, command: str, commit: str) -> None:
    """``commit``: the code this look mutated (HEAD when it started; later commits are not in its copies)."""
    lines = [
        f"$ {command}   # code: commit {commit}",
        "",
        "# Mutation testing of the mechanism modules (mutmut)",
        "",
        "Score: (killed + timed out) / mutants checked. A survivor is a change to the module that none of its tests",
        "notices; each is to be killed by a new test or explained as equivalent (issue 53). A mutant mutmut timed out",
        "is run again directly, without mutmut's fork, and counted by that run (`recheck_timeouts`); rows made before",
        "2026-11-27 (fourth session) took mutmut's timeouts as kills.",
        "",
        "Each row was run at the commit it names; the command above ran the modules of this look only, and the",
        "other rows are kept from earlier looks.",
        "",
        "| module | tests | mutants | killed | timed out | survived | no tests | score | seconds | commit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        score = "n/a" if r["score"] is None else f"{r['score']:.1%}"
        lines.append(
            f"| `{r['module']}` | {', '.join(Path(t).name for t in r['tests'])} | {r['total']} | {r['killed']} | "
            f"{r['timeout']} | {r['survived']} | {r['no_tests']} | {score} | {r['seconds']} | "
            f"{r.get('commit', 'fdc5fbe')} |"
        )
    for r in rows:
        if r["survivors"]:
            lines += ["", f"## Survivors in `{r['module']}`", "", *(f"- `{s}`" for s in r["survivors"])]
    from evolvekit.report.evidence import with_hand_part  # the reading below the hand mark is kept

    md = out.with_suffix(".md")
    md.write_text(with_hand_part("\n".join(lines) + "\n", md.read_text() if md.exists() else None))
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=sorted(MODULES), help="these modules only")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "mutation", help="where the copies go")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "mutation")
    parser.add_argument(
        "--timeout-constant",
        type=float,
        default=1.0,
        help="mutmut's timeout_constant in seconds (default 1, mutmut's own): raise it where a forked worker loads "
        "a model its tests' measured time did not include",
    )
    parser.add_argument(
        "--timeout-multiplier",
        type=float,
        default=15.0,
        help="mutmut's timeout_multiplier (default 15, mutmut's own): lower it for modules whose tests run models",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on with a module's earlier look in its copy: its kills stand, its survivors and timeouts are checked "
        "again with the tests as they are now, and mutmut re-tests the functions whose source changed",
    )
    parser.add_argument(
        "--recheck",
        nargs="*",
        default=[],
        help="with --resume: mutmut names (prefixes, e.g. evolvekit.orchestrator.build.x__coevolve_hook) whose kills "
        "are checked again too (their tests lost an assertion since)",
    )
    parser.add_argument(
        "--reopen",
        nargs="*",
        default=None,
        help="with --resume: only the survivors whose mutmut names start with one of these are tested again (the "
        "tests added since aim at them); the other survivors keep their verdict. Default: every survivor",
    )
    parser.add_argument(
        "--save-verdicts",
        action="store_true",
        help="run nothing: write each --only module's verdicts from its copy to benchmarks/results/mutation_verdicts/"
        "<module>.json, to be committed, so a later --resume on a machine without the copy goes on from them",
    )
    args = parser.parse_args()
    if args.save_verdicts:
        for name in args.only or []:
            meta = args.work / name / "mutants" / "src" / "evolvekit" / (MODULES[name][0] + ".meta")
            print(f"{name}: {save_verdicts(meta, VERDICTS / f'{name}.json')}", flush=True)
        return
    if not (ROOT / ".venv" / "bin" / "mutmut").exists():
        sys.exit("mutmut is not installed: .venv/bin/pip install -e '.[mutation]' -c constraints.txt")
    code = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    previous = args.out.with_suffix(".json")
    for name in args.only or list(MODULES):
        module, tests = MODULES[name]
        print(f"{name}: mutating src/evolvekit/{module} against {', '.join(tests)}", flush=True)
        looked = mutate(
            name,
            module,
            tests,
            args.work,
            args.timeout_multiplier,
            timeout_constant=args.timeout_constant,
            resume=args.resume,
            recheck=tuple(args.recheck),
            reopen=None if args.reopen is None else tuple(args.reopen),
        )
        row = {**looked, "commit": code.stdout.strip()}
        # modules not run now keep their earlier row (each row names the commit it was run at), read when this row is
        # written: another look may have written its rows meanwhile
        rows = json.loads(previous.read_text()) if previous.is_file() else []
        rows = [r for r in rows if r["module"] != row["module"]] + [row]
        print(json.dumps({k: v for k, v in row.items() if k != "survivors"}), flush=True)
        command = " ".join(["python", "benchmarks/audits/mutation.py", *sys.argv[1:]])
        write_report(rows, args.out, command, code.stdout.strip())


if __name__ == "__main__":
    main()
