#!/usr/bin/env bash
# The same benchmark from two checkouts on one GPU machine, alternating A B A B ..., each run
# importing only its own tree's sources (PYTHONPATH), so what a change costs is measured in one
# session on one machine (a refactor must not move the step time).
#
#   bash bench/ab_trees.sh A_TREE B_TREE OUT_DIR ROUNDS SCRIPT [ARGS...]
#
# SCRIPT is a path under bench/ in each tree; each "{out}" in ARGS becomes
# OUT_DIR/<script>-<A|B>-<round>.json. Source bench/gpu_env.sh first (it installs the carried
# wheels and the packages' entry points into /tmp/site); `python3 bench/ab_summary.py OUT_DIR`
# then prints and writes the medians side by side.
set -euo pipefail
a=$1 b=$2 out=$3 rounds=$4 script=$5
shift 5
mkdir -p "$out"
sources() {
  local tree=$1 paths=""
  for src in core/src plugins/*/src; do [ -d "$tree/$src" ] && paths="$paths:$tree/$src"; done
  echo "${paths#:}"
}
for round in $(seq 1 "$rounds"); do
  for side in A B; do
    tree=$a
    [ "$side" = B ] && tree=$b
    name="$(basename "$script" .py)-$side-$round"
    args=("${@//\{out\}/$out/$name.json}")
    echo "== $name ($tree)"
    (cd "$tree" && PYTHONPATH="$(sources "$(pwd)"):${PYTHONPATH:-}" python3 "bench/$script" "${args[@]}") \
      > "$out/$name.log" 2>&1 || { echo "$name failed:"; tail -n 20 "$out/$name.log"; exit 1; }
    tail -n 2 "$out/$name.log"
  done
done
