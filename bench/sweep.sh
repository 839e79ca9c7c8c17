#!/usr/bin/env bash
# Benchmark (not a test): a one-turn sweep of RUNS runs (default 10,000) on the demo agent,
# against a floor that only writes the same number of files of the same sizes atomically
# (`wt bench-floor`, the same temp-file + rename as the runner). Prints both wall times,
# their ratio (target: at most 1.3) and peak RSS at RUNS/10 and RUNS runs (target: flat).
#
#   bench/sweep.sh            # 10,000 runs
#   RUNS=2000 bench/sweep.sh
set -euo pipefail

RUNS=${RUNS:-10000}
REPS=${REPS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build -q --release -p windtunnel --bin wt)
wt=$target/release/wt

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pack/scenarios"
cp "$root/host/packs/demo/pack.toml" "$work/pack/"
cp "$root/host/packs/demo/scenarios/order-status.toml" "$work/pack/scenarios/"

# Output directories are never deleted during the measurements: ext4 makes inode allocation
# slow right after many deletions (`recently_deleted`), which would skew whichever ran next.
fresh_dir() {
    mktemp -d "$work/out.XXXXXX"
}

# measure CMD... → prints "<seconds> <max RSS KiB>"
measure() {
    sync
    /usr/bin/time -f '%e %M' -o "$work/time" "$@" >/dev/null 2>&1
    cat "$work/time"
}

sweep() {
    measure "$wt" run --pack "$work/pack" --runs "$1" --jobs 1 --seed 1 --out "$2"
}

# File sizes of one run (all runs of this scenario have the same sizes).
probe=$(fresh_dir)
sweep 10 "$probe" >/dev/null
trace_bytes=$(find "$probe" -name '*.json' ! -name '*.*.json' -printf '%s\n' | awk '{s+=$1} END {printf "%d", s/NR}')
score_bytes=$(find "$probe" -name '*.score.json' -printf '%s\n' | awk '{s+=$1} END {printf "%d", s/NR}')

best_sweep=999999 best_floor=999999 rss_full=0
for _ in $(seq "$REPS"); do
    read -r f_s _ < <(measure "$wt" bench-floor --out "$(fresh_dir)" --count "$RUNS" \
        --trace-bytes "$trace_bytes" --score-bytes "$score_bytes")
    out=$(fresh_dir)
    read -r s_s s_kb < <(sweep "$RUNS" "$out")
    n=$(find "$out" -name '*.json' | wc -l)
    [ "$n" -eq $((RUNS * 2)) ] || { echo "expected $((RUNS * 2)) files, found $n" >&2; exit 1; }
    best_floor=$(awk -v a="$best_floor" -v b="$f_s" 'BEGIN {print (b < a ? b : a)}')
    best_sweep=$(awk -v a="$best_sweep" -v b="$s_s" 'BEGIN {print (b < a ? b : a)}')
    rss_full=$s_kb
done
read -r _ rss_tenth < <(sweep $((RUNS / 10)) "$(fresh_dir)")

echo "runs:            $RUNS (one turn each; trace $trace_bytes B, score $score_bytes B)"
echo "floor wall time: ${best_floor}s (best of $REPS)"
echo "sweep wall time: ${best_sweep}s (best of $REPS)"
awk -v s="$best_sweep" -v f="$best_floor" 'BEGIN {printf "ratio:           %.2fx the floor (target <= 1.3x)\n", (f > 0 ? s / f : 0)}'
echo "peak RSS:        ${rss_tenth} KiB at $((RUNS / 10)) runs, ${rss_full} KiB at $RUNS runs"
