#!/usr/bin/env bash
# Same-seed exploration, two checkouts side by side (the llguidance swap of issue 54: before = its parent commit in
# a worktree, after = this checkout): `tasks synthesize` on the quickstart config for seeds 0-4, one run at a time;
# one line per run in OUT/summary.txt (seconds and the funnel), the explorations and kept tasks beside it.
#   git worktree add /tmp/before <parent commit> && ln -s "$PWD/.venv" /tmp/before/.venv
#   bash benchmarks/audits/constrained_same_seed.sh /tmp/before "$PWD" runs/constrained_same_seed
set -euo pipefail
before=$(realpath "$1"); after=$(realpath "$2"); out=$(realpath -m "$3"); mkdir -p "$out"
py="$after/.venv/bin/python"  # not realpath: that resolves the venv's link to the base interpreter
for seed in 0 1 2 3 4; do
  for side in before after; do
    if [ "$side" = before ]; then dir=$before; else dir=$after; fi
    start=$(date +%s.%N)
    (cd "$dir" && PYTHONPATH="$dir/src" "$py" -m evolvekit.cli.main tasks synthesize -c configs/quickstart.yaml \
      --n 8 --set run.seed=$seed --out "$out/${side}_seed$seed.jsonl" --json > "$out/${side}_seed$seed.out" \
      2> "$out/${side}_seed$seed.err")
    end=$(date +%s.%N)
    echo "$side $seed $(echo "$end - $start" | bc) s $(tail -1 "$out/${side}_seed$seed.out")" >> "$out/summary.txt"
  done
done
