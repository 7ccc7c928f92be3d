"""The `run` commands README and docs/ show are accepted as `config validate` accepts them (issue 80: the README's
scale-out example combined Ray rollouts with the vLLM engine, which config refuses; nothing checked it)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from evolvekit.config import load_config, training_problem
from evolvekit.orchestrator.run_dir import registry_problem

ROOT = Path(__file__).resolve().parents[2]
_RUN = re.compile(r"(?:^|\s)(?:\S*/)?(?:evolvekit|evolvekit\.cli\.main) run (.*)$")


def code_blocks(text: str) -> list[str]:
    blocks, inside, cur = [], False, []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if inside:
                blocks.append("\n".join(cur))
            inside, cur = not inside, []
        elif inside:
            cur.append(line)
    return blocks


def run_commands(text: str) -> list[tuple[str, list[str]]]:
    """(config path, --set overrides) of every `evolvekit run` in the text's code blocks; CONFIG (a placeholder for
    the reader's config) reads as the quickstart. Resumes and commands on a config the reader writes are left out."""
    found = []
    for block in code_blocks(text):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            m = _RUN.search(line.split(" #")[0].strip())
            if not m:
                continue
            args = shlex.split(m.group(1))
            if not args or args[0].startswith("-"):
                continue  # `run --resume runs/...`: the stored config
            config = "configs/quickstart.yaml" if args[0] == "CONFIG" else args[0]
            sets = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--set"]
            if config.startswith("configs/"):
                found.append((config, sets))
    return found


def test_the_command_finder_reads_continued_lines_placeholders_and_quotes():
    text = "```bash\n# a comment\ntorchrun -m evolvekit.cli.main run CONFIG \\\n    --set a.b=1  # why\n"
    text += '.venv/bin/evolvekit run configs/x.yaml --set "c.d=[e, f]"\nevolvekit run --resume runs/r\n```\n'
    assert run_commands(text) == [("configs/quickstart.yaml", ["a.b=1"]), ("configs/x.yaml", ["c.d=[e, f]"])]


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMANDS = [(doc.name, config, sets) for doc in DOCS for config, sets in run_commands(doc.read_text())]


def test_the_docs_show_run_commands():
    assert len(COMMANDS) >= 12 and {d for d, _, _ in COMMANDS} >= {"README.md", "training.md", "scale.md"}


@pytest.mark.parametrize(("doc", "config", "sets"), COMMANDS, ids=[f"{d}:{c}:{len(s)}" for d, c, s in COMMANDS])
def test_a_documented_run_command_is_accepted(doc, config, sets, monkeypatch):
    monkeypatch.chdir(ROOT)
    # a file the command's reader makes first (e.g. `tasks synthesize --out runs/x.jsonl`) stands for itself
    sets = [s for s in sets if "=runs/" not in s]
    cfg = load_config(ROOT / config, sets)
    problem = training_problem(cfg) or registry_problem(cfg, True)
    assert problem is None, f"{doc}: evolvekit run {config} {' '.join(sets)}: {problem}"
