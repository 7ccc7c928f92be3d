import json, subprocess, sys, re
LOOK = "/work/main/runs/mutation/build"
P = "src/evolvekit/orchestrator/build.py"
old = json.load(open(LOOK + "/mutants/src/evolvekit/orchestrator/build.py.meta"))["exit_code_by_key"]
names = [k for k, v in old.items() if v != 1]
TESTS = {
 "x_build_loop": "own_objects or one_kind or synthesis_navigation_and_evolving or configured_judge or teaches_search_with or evaluates_the_eval_split or held_out_synthesized_file or environments_build_loop or lambda_1",
 "x__navigation": "navigation_stages_get or embeds_merges_and_resumes",
 "x_build_trainer": "build_trainer_wires or engine_over_the_policy_with or boost_only",
 "x__sample_stage": "sample_stage_gets",
 "x_rollout_template": "rollout_template",
 "x__task_supply": "task_supply_gets",
 "x_rollout_backend": "rollout_backend",
 "x_synthesis_stage": "synthesis_stage",
 "x__coevolve_hook": "coevolve_hook",
}
orig = open(P).read()
out = open("/work/logs/handall.jsonl", "a")
try:
    for n in names:
        fn = n.split("build.")[1].split("__mutmut_")[0]
        show = subprocess.run([LOOK + "/.venv/bin/mutmut", "show", n], cwd=LOOK, capture_output=True, text=True).stdout
        minus = [l[1:] for l in show.splitlines() if l.startswith("-") and not l.startswith("---")]
        plus = [l[1:] for l in show.splitlines() if l.startswith("+") and not l.startswith("+++")]
        a, b = "\n".join(minus), "\n".join(plus)
        if not minus or orig.count(a) != 1:
            out.write(json.dumps({"name": n, "verdict": "not applied", "count": orig.count(a) if minus else None}) + "\n"); out.flush(); continue
        open(P, "w").write(orig.replace(a, b))
        k = TESTS.get(fn, "")
        r = subprocess.run([".venv/bin/python", "-m", "pytest", "tests/cpu/test_build_wiring.py", "-q", "-x", "-p", "no:cacheprovider", "-k", k], capture_output=True, text=True)
        open(P, "w").write(orig)
        v = {0: "survived", 1: "killed"}.get(r.returncode, f"rc{r.returncode}")
        out.write(json.dumps({"name": n, "verdict": v}) + "\n"); out.flush()
finally:
    open(P, "w").write(orig)
