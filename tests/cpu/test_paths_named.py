"""Every path the repository names for a reader resolves (issue 80.3): the files that README, docs/, the benchmark
index, configs/ and the committed results name exist, their relative Markdown links lead somewhere, and every
benchmark script is in the index.

Left out, on purpose: verbatim program output kept as a result (``*.txt``, ``*.jsonl``: what a tool printed at the
time, e.g. a test path of then) and kept evidence runs (``benchmarks/results/kept_runs/``: each run's recorded config,
whose paths resolve at the commit that made it)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_TOP = ("configs", "benchmarks", "docs", "src", "tests", "scripts", "examples")
_EXT = "py|sh|yaml|yml|md|jsonl|json|png|txt|toml"
# a repository path: one of the top folders, then a file with a known extension; not part of a longer path, a glob or
# a placeholder (`benchmarks/results/*.md`, `configs/<name>.yaml`)
_PATH = re.compile(rf"(?<![\w/.<{{$-])((?:{'|'.join(_TOP)})/[\w./-]*\w\.(?:{_EXT}))(?![\w*<{{])")
_PACKAGES = sorted(p.name for p in (ROOT / "src" / "evolvekit").iterdir() if p.is_dir() and p.name[0].isalpha())
# a module named from inside the package, as docs do (`env/bfcl/families.py`)
_MODULE = re.compile(rf"(?<![\w/.<{{$-])((?:{'|'.join(_PACKAGES)})/[\w./-]*\w\.py)(?![\w*<{{])")
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return out.split()


def _read_for_paths() -> list[str]:
    """The files whose named paths must resolve: README, docs, the benchmark index and scripts, configs, results."""
    keep = []
    for f in _tracked():
        if f.startswith("benchmarks/results/kept_runs/") or f.endswith((".txt", ".jsonl")):
            continue
        if (
            f == "README.md"
            or f.startswith(("docs/", "configs/", "benchmarks/"))
            and f.endswith((".md", ".yaml", ".json", ".py", ".sh"))
        ):
            keep.append(f)
    return keep


def named_paths(text: str) -> tuple[set[str], set[str]]:
    """(paths from the checkout's root, module paths inside src/evolvekit/) that ``text`` names."""
    return {m.group(1) for m in _PATH.finditer(text)}, {m.group(1) for m in _MODULE.finditer(text)}


def test_the_path_finder_sees_paths_and_leaves_globs_and_placeholders():
    text = "run `benchmarks/evidence/evidence.py configs/evidence/x.yaml`, see benchmarks/results/*.md,"
    text += " configs/<name>.yaml and env/bfcl/families.py, not src/evolvekit/env/base.py's tail."
    rooted, modules = named_paths(text)
    assert rooted == {"benchmarks/evidence/evidence.py", "configs/evidence/x.yaml", "src/evolvekit/env/base.py"}
    assert modules == {"env/bfcl/families.py"}


def test_every_path_named_in_readme_docs_configs_benchmarks_and_results_exists():
    files = _read_for_paths()
    assert "README.md" in files and "benchmarks/README.md" in files and len(files) > 100
    missing: dict[str, list[str]] = {}
    for f in files:
        rooted, modules = named_paths((ROOT / f).read_text())
        for p in rooted:
            if not (ROOT / p).exists():
                missing.setdefault(p, []).append(f)
        for p in modules:
            if not (ROOT / "src" / "evolvekit" / p).exists():
                missing.setdefault(p, []).append(f)
    assert not missing, "\n".join(f"{p} (named in {', '.join(sorted(fs)[:3])})" for p, fs in sorted(missing.items()))


def test_relative_markdown_links_lead_somewhere():
    broken = []
    for f in _tracked():
        if not f.endswith(".md") or f.startswith("benchmarks/results/kept_runs/"):
            continue
        for m in _LINK.finditer((ROOT / f).read_text()):
            target = m.group(1)
            if "://" in target or target.startswith("mailto:"):
                continue
            if not ((ROOT / f).parent / target).exists():
                broken.append(f"{f}: {target}")
    assert not broken, "\n".join(broken)


def test_every_benchmark_script_is_in_its_group_and_in_the_index():
    index = (ROOT / "benchmarks" / "README.md").read_text()
    scripts = [f for f in _tracked() if f.startswith("benchmarks/") and not f.startswith("benchmarks/results/")]
    loose = [f for f in scripts if f.count("/") == 1 and f != "benchmarks/README.md"]
    assert not loose, f"scripts outside a group folder: {loose}"
    groups = {f.split("/")[1] for f in scripts if f.count("/") == 2}
    assert groups == {"evidence", "audits", "speed", "device"}
    unindexed = [f for f in scripts if f.count("/") == 2 and f"`{f}`" not in index]
    assert not unindexed, f"not in benchmarks/README.md: {unindexed}"
