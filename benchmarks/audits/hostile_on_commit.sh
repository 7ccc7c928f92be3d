#!/usr/bin/env bash
# Runs today's hostile-input tests of round three (tests/cpu/test_hostile_round3.py) against an older commit's code,
# to show that each one fails there (issue 78.6: "every hostile finding has a test that fails on 37c233b's code").
#
#   bash benchmarks/audits/hostile_on_commit.sh 37c233b [pytest -k expression] 2>&1 | tee /tmp/hostile_on_37c233b.log
#
# The commit's source is checked out into a temporary worktree and put first on PYTHONPATH (the project's venv and
# today's test file are used); the one module the file imports at its top that the old code lacks (safeyaml) is made
# optional there, so each test fails on its own, by a missing name or by its assertion. Memory is capped at 10 GB
# (an old alias bomb expands past 3 GB), and each test at 200 s (an old client that hangs).
set -euo pipefail
cd "$(dirname "$0")/../.."
rev="${1:?usage: hostile_on_commit.sh REV [-k expression]}"
select="${2:-}"
tree="$(mktemp -d)/old"
git worktree add -f --detach "$tree" "$rev" >/dev/null
trap 'git worktree remove --force "$tree"' EXIT
cp tests/cpu/test_hostile_round3.py "$tree/tests/cpu/"
python3 - "$tree/tests/cpu/test_hostile_round3.py" <<'PY'
import sys
from pathlib import Path
p = Path(sys.argv[1])
s = p.read_text()
line = "from evolvekit.safeyaml import YamlTooLarge, expanded_nodes, load_yaml\n"
shim = "try:\n    " + line + "except ImportError:  # absent at the old commit\n    YamlTooLarge = expanded_nodes = load_yaml = None\n"
p.write_text(s.replace(line, shim))
PY
venv="$PWD/.venv"
cd "$tree"
ulimit -v 10000000
PYTHONPATH="$tree/src" "$venv/bin/python" -m pytest -q -p no:cacheprovider --timeout 200 --tb=line -rA \
  tests/cpu/test_hostile_round3.py ${select:+-k "$select"} || true
