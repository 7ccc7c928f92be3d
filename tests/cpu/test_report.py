"""Report, dashboard (escaping, live read-only store, a real headless Chromium screenshot) and the ablation runner."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from evolvekit.config import ModelsConfig, load_config
from evolvekit.llm.tiny import make_tiny_model
from evolvekit.orchestrator.build import build_loop
from evolvekit.orchestrator.run_dir import open_run
from evolvekit.types import Step, StepLabel, Trajectory

HELPERS = tuple(r for r in ModelsConfig.model_fields if r != "policy")  # every helper role

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")
XSS = "<script>alert('x')</script>"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    import sys

    sys.path.insert(0, PLUGINS)
    tmp = tmp_path_factory.mktemp("report")
    tiny = make_tiny_model(tmp / "tiny")
    cfg = load_config(
        None,
        [
            f"run.out_dir={tmp}",
            "env.name=coin",
            "env.plugins=[coin_env]",
            *[f"models.{r}.model={tiny}" for r in HELPERS],
            f"models.policy.model={tiny}",
            "models.policy.max_new_tokens=8",
            "rollout.max_steps=1",
            "rollout.group_size=2",
            "train.iterations=2",
            "train.tasks_per_iteration=2",
            "train.eval_tasks=2",
            "train.eval_k=1",
            "train.eval_every=1",
            "train.autocast=off",
        ],
    )
    cfg, rd, store = open_run(cfg, None)
    build_loop(cfg, rd, store, show_progress=False).run()
    # one hand-made trajectory with attribution labels and hostile text, as a model could produce
    traj = Trajectory(
        trajectory_id="traj-xss",
        task_id="coin-train-0",
        outcome_reward=1.0,
        steps=[Step(index=0, action_text=XSS, observation="<b>obs</b>"), Step(index=1, action_text="fine")],
        step_attributions=[StepLabel.GOOD, StepLabel.BAD],
        attribution_source="grounded",
    )
    with store.transaction() as c:
        store.put_trajectories(c, [traj], 1, "train")
    store.close()
    return rd


@pytest.mark.slow
def test_report_writes_html_and_figures(run_dir):
    from evolvekit.report.html import write_report

    page = write_report(run_dir, baseline=run_dir)
    text = page.read_text()
    assert "Held-out evaluation" in text and "learning.png" in text and "steps@0.9" in text
    assert "Helper sources" in text and "<td>extraction</td><td>off</td>" in text
    assert (page.parent / "learning.png").stat().st_size > 1000
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "report", str(run_dir / "nope")], capture_output=True, text=True
    )
    assert res.returncode == 2 and "not a run directory" in res.stderr


def test_dashboard_pages_escape_everything(run_dir):
    from fastapi.testclient import TestClient

    from evolvekit.report.dashboard import create_dashboard

    client = TestClient(create_dashboard(run_dir), base_url="http://127.0.0.1:8770")
    for path in ("/", "/tasks", "/trajectories", "/experiences"):
        assert client.get(path).status_code == 200, path
    page = client.get("/trajectories/traj-xss").text
    assert XSS not in page and "&lt;script&gt;" in page and "&lt;b&gt;obs&lt;/b&gt;" in page
    assert "class='GOOD'" in page and "class='BAD'" in page
    assert "data-source='grounded'" in page and "class='src-grounded'>GOOD (grounded)" in page  # coloured by source
    assert client.get("/trajectories/none").status_code == 404
    assert client.get("/figures/../run.sqlite").status_code == 404
    overview = client.get("/").text
    assert "Helper sources" in overview and "<td>attributor</td><td>off</td>" in overview
    assert "/figures/learning.png" in overview and client.get("/figures/learning.png").status_code == 200


def _ablation_folder(run_dir, root, rows=("grpo_real", "<b>row")):
    for row in rows:
        for seed in (0, 1):
            shutil.copytree(run_dir, root / row / f"seed{seed}", ignore=shutil.ignore_patterns("report"))
    return root


@pytest.mark.slow
def test_report_on_a_folder_of_runs_groups_rows_over_seeds(run_dir, tmp_path):
    import json
    import sys

    from evolvekit.errors import ConfigError
    from evolvekit.report.html import write_collection_report

    root = _ablation_folder(run_dir, tmp_path / "abl")
    page = write_collection_report(root, baseline="grpo_real")
    text = page.read_text()
    rows = json.loads((page.parent / "rows.json").read_text())
    assert [r["row"] for r in rows] == ["<b>row", "grpo_real"] and all(r["seeds"] == "2/2" for r in rows)
    assert "<b>row" not in text and "&lt;b&gt;row" in text  # row names are escaped like any other text
    assert rows[1]["steps@0.9"] is not None and "±" in rows[1]["avg@1"]
    for png in ("heldout_final_by_row.png", "heldout_by_row.png", "train_success_by_row.png"):
        assert (page.parent / png).stat().st_size > 1000, png
    assert (root / "grpo_real" / "seed1" / "report" / "index.html").is_file()
    assert "../grpo_real/seed1/report/index.html" in text
    with pytest.raises(ConfigError, match="baseline row"):
        write_collection_report(root, baseline="nope")
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "report", str(tmp_path)], capture_output=True, text=True
    )
    assert res.returncode == 0 and res.stdout.strip().endswith("index.html")
    (tmp_path / "empty").mkdir()
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "report", str(tmp_path / "empty")], capture_output=True, text=True
    )
    assert res.returncode == 2 and "holds no runs" in res.stderr


def test_dashboard_on_a_folder_of_runs_mounts_each_run_and_picks_up_new_ones(run_dir, tmp_path):
    import re

    from fastapi.testclient import TestClient

    from evolvekit.report.dashboard import create_collection_dashboard

    root = _ablation_folder(run_dir, tmp_path / "abl", rows=("grpo_real",))
    client = TestClient(create_collection_dashboard(root), base_url="http://localhost:8770")
    links = re.findall(r"href='([^']+)'", client.get("/").text)
    assert links == ["/runs/grpo_real/seed0/", "/runs/grpo_real/seed1/"]
    run_page = client.get("/runs/grpo_real/seed1/").text
    assert "href='/runs/grpo_real/seed1/tasks'" in run_page and "href='/'" in run_page
    img = re.findall(r"src='([^']+)'", run_page)[0]
    assert img.startswith("/runs/grpo_real/seed1/figures/") and client.get(img).status_code == 200
    traj = client.get("/runs/grpo_real/seed1/trajectories/traj-xss").text
    assert "class='GOOD'" in traj and XSS not in traj
    shutil.copytree(run_dir, root / "overall" / "seed0", ignore=shutil.ignore_patterns("report"))  # a live ablation
    assert "/runs/overall/seed0/" in client.get("/").text
    assert client.get("/runs/overall/seed0/tasks").status_code == 200


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian chromium is not installed (scripts/setup.sh --tests installs it when it can)"
)
@pytest.mark.slow
def test_trajectory_view_renders_attribution_colours_in_chromium(run_dir, tmp_path):
    import uvicorn
    from matplotlib import image

    from evolvekit.report.dashboard import BAD_COLOR, GOOD_COLOR, create_dashboard

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_dashboard(run_dir), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/trajectories/traj-xss"
    for _ in range(100):
        try:
            if httpx.get(url).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    shot = tmp_path / "shot.png"
    try:
        subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--screenshot={shot}",
                "--window-size=1200,700",
                url,
            ],
            capture_output=True,
            timeout=120,
        )
    finally:
        server.should_exit = True
        thread.join(timeout=5)
    assert shot.is_file()
    px = (image.imread(str(shot))[..., :3] * 255).round().astype(int).reshape(-1, 3)

    def present(hex_color):
        rgb = [int(hex_color[i : i + 2], 16) for i in (1, 3, 5)]
        return int(((abs(px - rgb) <= 3).all(axis=1)).sum())

    assert present(GOOD_COLOR) > 500 and present(BAD_COLOR) > 500  # both rows rendered in their colours


def _ablation_base(tmp_path, monkeypatch, **train) -> Path:
    """A base config for ablation tests: the coin test env and a tiny random model."""
    monkeypatch.syspath_prepend(PLUGINS)
    tiny = make_tiny_model(tmp_path / "tiny")
    base = tmp_path / "base.yaml"
    base.write_text(
        yaml.safe_dump(
            {
                "env": {"name": "coin", "plugins": ["coin_env"]},
                # every role tiny: the explorer that makes the run's own worked examples too (issue 97)
                "models": {
                    **{
                        r: {"model": str(tiny)}
                        for r in ("explorer", "synthesizer", "judge", "attributor", "summarizer")
                    },
                    "policy": {"model": str(tiny), "max_new_tokens": 6},
                },
                "rollout": {"max_steps": 1, "group_size": 2},
                "train": {"autocast": "off", "eval_tasks": 2, "eval_k": 1, **train},
            }
        )
    )
    return base


@pytest.mark.slow
def test_ablation_runner_table_and_resume(tmp_path, monkeypatch):
    from evolvekit.report.ablate import run_ablation

    base = _ablation_base(tmp_path, monkeypatch)
    spec = tmp_path / "ablation.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "base": str(base),
                "out_dir": str(tmp_path / "abl"),
                "seeds": [0, 1],
                "budget": ["train.iterations=1", "train.tasks_per_iteration=1"],
                "rows": [
                    {"name": "base_model", "overrides": ["train.iterations=0", "train.eval_after=false"]},
                    {"name": "grpo_real"},
                ],
            }
        )
    )
    table = run_ablation(spec).read_text()
    assert "| base_model |" in table and "| grpo_real |" in table and "±" in table
    assert len(list((tmp_path / "abl").glob("*/seed*/summary.json"))) == 4
    assert (tmp_path / "abl" / "grpo_real" / "seed0" / "checkpoints").is_dir()  # kept unless asked otherwise
    stamp = (tmp_path / "abl" / "grpo_real" / "seed0" / "summary.json").stat().st_mtime
    spec.write_text(yaml.safe_dump({**yaml.safe_load(spec.read_text()), "drop_checkpoints": True}))
    run_ablation(spec)  # finished runs are skipped, not redone; their checkpoints are dropped
    assert (tmp_path / "abl" / "grpo_real" / "seed0" / "summary.json").stat().st_mtime == stamp
    assert not list((tmp_path / "abl").glob("*/seed*/checkpoints"))
    assert len(list((tmp_path / "abl").glob("*/seed*/run.sqlite"))) == 4


@pytest.mark.slow
def test_ablation_validates_every_row_first_and_survives_a_dying_run(tmp_path, monkeypatch):
    import json

    from evolvekit.errors import ConfigError
    from evolvekit.report.ablate import run_ablation

    base = _ablation_base(tmp_path, monkeypatch, eval_before=False, iterations=1, tasks_per_iteration=1)
    spec = tmp_path / "ablation.yaml"
    rows = [
        {"name": "crash", "overrides": ["env.name=coin_crash"]},
        {"name": "grpo_real"},
        {"name": "typo", "overrides": ["train.iteratoins=3"]},
    ]
    spec.write_text(yaml.safe_dump({"base": str(base), "out_dir": str(tmp_path / "abl"), "seeds": [0], "rows": rows}))
    with pytest.raises(ConfigError, match="typo"):  # the last row's typo stops the table before any run starts
        run_ablation(spec)
    assert not (tmp_path / "abl").exists()

    spec.write_text(
        yaml.safe_dump({"base": str(base), "out_dir": str(tmp_path / "abl"), "seeds": [0], "rows": rows[:2]})
    )
    table = run_ablation(spec).read_text()  # the first run's process dies; the second row still runs
    assert "| crash | 0/1 |" in table and "| grpo_real | 1/1 |" in table
    results = json.loads((tmp_path / "abl" / "results.json").read_text())
    assert "crash/seed0" in results["failed"] and "grpo_real/seed0" not in results["failed"]
    assert (tmp_path / "abl" / "grpo_real" / "seed0" / "summary.json").is_file()
    assert (tmp_path / "abl" / "crash" / "seed0" / "run.sqlite").is_file()  # kept, to resume


_ORPHAN_SCRIPT = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor

def work(parent):
    from evolvekit.report.ablate import exit_when_orphaned
    exit_when_orphaned(parent, 0.05)
    print(os.getpid(), flush=True)
    time.sleep(120)

if __name__ == "__main__":
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(work, os.getpid()).result()
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has exited (its new parent may not reap it at once)


def test_a_run_worker_ends_when_the_ablation_process_is_killed(tmp_path):
    """A killed table process (SIGKILL: no handler runs) takes its spawned run worker with it, so a restart never
    has two processes writing one run folder; while the table lives, the worker runs on."""
    import os
    import signal
    import sys

    script = tmp_path / "table.py"
    script.write_text(_ORPHAN_SCRIPT)
    table = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(table.stdout.readline())
        time.sleep(0.5)  # ten watch intervals with the parent alive
        assert _alive(worker) and table.poll() is None
        os.kill(table.pid, signal.SIGKILL)
        table.wait(10)
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(worker)
    finally:
        table.kill()
        table.stdout.close()


def test_heldout_curve_of_a_run_evaluated_only_after_training():
    from evolvekit.report.figures import RunSummary

    run = RunSummary(
        Path("."), {0: {"train/loss": 1.0}, 1: {"train/loss": 0.5}}, {"after": {"avg@2": 0.5, "best@2": 1.0}}
    )
    assert run.heldout_curve() == ([2.0], [0.5], "avg@2")
    assert RunSummary(Path("."), {}, {}).heldout_curve() == ([], [], "avg@k")


def test_periodic_evaluation_leaves_the_last_point_to_the_evaluation_after_training(run_dir):
    from evolvekit.report.figures import load_summary

    run = load_summary(run_dir)
    assert "eval/avg@1" in run.metrics[0] and "eval/avg@1" not in run.metrics[1]  # not evaluated twice at the end
    xs, ys, key = run.heldout_curve()
    assert xs == [0.0, 1.0, 2.0] and key == "avg@1" and ys[-1] == run.evaluations["after"]["avg@1"]


def test_a_run_records_the_code_that_made_it(run_dir):
    from evolvekit.provenance import code_commit
    from evolvekit.report.figures import load_summary

    assert load_summary(run_dir).code == code_commit()  # this checkout's commit (results files name it per row)


def test_before_and_after_stand_at_the_iterations_they_were_measured():
    """Issue 78.5: x counts policy updates done. Before training at 0, after training at the iteration it recorded
    (a run of 3 iterations whose metrics were kept for 2 shows 'after' at 3, not at 2 or 2.5)."""
    from evolvekit.orchestrator.metrics import evaluation_x
    from evolvekit.report.figures import RunSummary

    assert evaluation_x("before", {"iteration": -1}, 5) == 0.0
    assert evaluation_x("after", {"iteration": 3}, 2) == 3.0 and evaluation_x("after", {}, 2) == 2.0
    run = RunSummary(
        Path("."), {0: {"eval/avg@2": 0.25}, 1: {}}, {"before": {"avg@2": 0.0}, "after": {"avg@2": 0.5, "iteration": 3}}
    )
    assert run.heldout_curve() == ([0.0, 1.0, 3.0], [0.0, 0.25, 0.5], "avg@2")
