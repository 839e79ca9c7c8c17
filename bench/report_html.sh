#!/usr/bin/env bash
# Benchmark (not a test): `wt report --format html` over a RUNS-run directory (default
# 10,000): half the runs fail (demo-forbidden-tool on order-status and escalate-human), half
# pass (demo on refund-damaged). Prints, at RUNS/10 and at RUNS runs: the page's render time
# (wall: best and median of REPS; CPU: best), its size, and peak RSS; and the table and JSON
# formats' wall times for comparison (all three go through the one reader: reading the runs
# dominates). On a machine shared with other work, wall time includes waiting; CPU does not. The page's size should not grow with the runs (details are sampled).
#
#   bench/report_html.sh                 # 10,000 runs
#   RUNS=2000 REPS=5 bench/report_html.sh
#   BENCH_DIR=/mnt/fresh bench/report_html.sh   # where to write (default: $TMPDIR)
set -euo pipefail

RUNS=${RUNS:-10000}
REPS=${REPS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build -q --release -p windtunnel --bin wt)
wt=$target/release/wt

work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/wt-report-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# make_runs DIR N: N runs, half failing, in DIR.
make_runs() {
    local fail_per=$(( $2 / 4 )) pass=$(( $2 - 2 * ($2 / 4) ))
    "$wt" run --agent demo-forbidden-tool --filter '*s*' --runs "$fail_per" --seed 1 --out "$1" >/dev/null 2>&1 || true
    "$wt" run --agent demo --filter refund-damaged --runs "$pass" --seed 2 --out "$1" >/dev/null 2>&1
}

# timed CMD... → prints "<wall seconds> <max RSS KiB> <CPU seconds>"
timed() {
    /usr/bin/time -f '%e %M %U %S' -o "$work/time" "$@" >/dev/null 2>&1
    awk '{printf "%s %s %.2f\n", $1, $2, $3 + $4}' "$work/time"
}

# REPS runs of CMD...: "best-wall median-wall max-rss best-cpu"
reps() {
    for _ in $(seq "$REPS"); do timed "$@"; done | sort -n |
        awk '{t[NR]=$1; if ($2>m) m=$2; if (NR==1 || $3<c) c=$3}
             END {printf "%s %s %d %s\n", t[1], t[int((NR+1)/2)], m, c}'
}

for n in $(( RUNS / 10 )) "$RUNS"; do
    dir=$work/runs-$n
    make_runs "$dir" "$n"
    traces=$(find "$dir" -name '*.json' ! -name '*.*.json' | wc -l)
    read -r best median rss cpu < <(reps "$wt" report "$dir" --format html -o "$work/page-$n.html")
    size=$(stat -c %s "$work/page-$n.html")
    detailed=$(grep -o '<details class="run"' "$work/page-$n.html" | wc -l)
    read -r tbest _ _ _ < <(reps "$wt" report "$dir")
    read -r jbest _ _ _ < <(reps "$wt" report "$dir" --format json)
    printf 'runs %6d: html wall best %ss median %ss, CPU %ss, %d bytes (%d KiB), %d runs in detail, peak RSS %d MiB; table %ss, json %ss\n' \
        "$traces" "$best" "$median" "$cpu" "$size" $(( size / 1024 )) "$detailed" $(( rss / 1024 )) "$tbest" "$jbest"
done
