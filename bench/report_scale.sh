#!/usr/bin/env bash
# Benchmark (not a test; it asserts nothing): reading runs back at scale. For each size, a
# runs directory made by the real `wt run` (demo pack, scenario order-status: half the runs
# by `demo`, which pass, half by `demo-forbidden-tool`, which fail — two sweeps, two
# journals), then, REPEATS times and alternated within each round, the wall time and peak
# RSS (`/usr/bin/time -f '%e %M'`) of
#
#   python3 bench/report_tally.py DIR          the floor: a plain tally of every trace and score
#   wt report DIR                              the table
#   wt report DIR --format json > /dev/null    every run listed, streamed to stdout
#   wt report DIR --format html -o page.html   the page
#   wt compare DIR DIR                         the sweep against itself
#
# and, with BASELINE=/path/to/an/older/wt, the same four with that binary, at the sizes up to
# BASELINE_UPTO (default 100000: an older wt that holds a summary of every run needs some GB
# for the page and the comparison of a million). Prints the medians, Python's time over wt's
# (the table) at each size, and each command's peak RSS.
#
#   bench/report_scale.sh                          # 1,000 … 1,000,000 runs
#   SIZES="1000 10000 100000" REPEATS=5 bench/report_scale.sh
#   BASELINE=/tmp/wt-old bench/report_scale.sh
#   BENCH_DIR=/mnt/fast bench/report_scale.sh      # where the runs go (default /dev/shm, a tmpfs)
#
# Disk: about 11 KiB a run on tmpfs (a 4 KiB page for each of a run's two files, and its
# journal lines), so 1,000,000 runs need about 11 GiB; a size that does not fit is skipped
# with a note. Each size's directory is removed before the next one is made.
set -euo pipefail

SIZES=${SIZES:-"1000 10000 100000 1000000"}
REPEATS=${REPEATS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build -q --release -p windtunnel --bin wt)
wt=$target/release/wt
baseline=${BASELINE:-}
baseline_upto=${BASELINE_UPTO:-100000}
if [ -n "$baseline" ] && [ ! -x "$baseline" ]; then
    echo "BASELINE=$baseline is not an executable" >&2
    exit 2
fi

work=$(mktemp -d "${BENCH_DIR:-/dev/shm}/wt-report-scale.XXXXXX")
trap 'rm -rf "$work"' EXIT

# timed NAME CMD...: appends "<wall s> <peak RSS KiB>" to $work/NAME.times
timed() {
    local name=$1
    shift
    /usr/bin/time -f '%e %M' -o "$work/time" "$@" >/dev/null 2>&1 || true
    tail -n 1 "$work/time" >>"$work/$name.times"
}

# median NAME FIELD: the median of field FIELD (1 wall, 2 RSS) of NAME's measurements
median() {
    awk -v f="$2" '{print $f}' "$work/$1.times" | sort -g |
        awk '{v[NR]=$1} END {if (NR == 0) print "-"; else print v[int((NR+1)/2)]}'
}

mib() { awk -v k="$1" 'BEGIN {if (k == "-") print "-"; else printf "%.0f", k / 1024}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b <= 0) print "-"; else printf "%.1fx", a / b}'; }

binaries=(wt)
[ -n "$baseline" ] && binaries+=(base)
echo "wt: $wt${baseline:+; baseline: $baseline}; $REPEATS round(s) per size, medians; $(nproc) CPU(s); $(date -u +%Y-%m-%dT%H:%MZ)"
printf '%9s %8s' runs python
for b in "${binaries[@]}"; do
    printf ' | %-4s %7s %7s %7s %7s %6s %13s' "$b" table ratio json html compare "RSS MiB t/j/h/c"
done
echo

for n in $SIZES; do
    need=$(( n * 11 + 4096 ))
    free=$(df -Pk "$work" | awk 'NR==2 {print $4}')
    if [ "$need" -gt "$free" ]; then
        echo "$n runs: skipped, needs about $(( need / 1024 )) MiB in $work, $(( free / 1024 )) MiB free"
        continue
    fi
    dir=$work/runs-$n
    rm -f "$work"/*.times
    "$wt" run --filter order-status --agent demo --runs $(( n - n / 2 )) --jobs 2 --seed 1 --out "$dir" >/dev/null 2>&1
    "$wt" run --filter order-status --agent demo-forbidden-tool --runs $(( n / 2 )) --jobs 2 --seed 2 --out "$dir" >/dev/null 2>&1 || true
    for _ in $(seq "$REPEATS"); do
        timed python python3 "$root/bench/report_tally.py" "$dir"
        for b in "${binaries[@]}"; do
            bin=$wt
            if [ "$b" = base ]; then
                [ "$n" -le "$baseline_upto" ] || continue
                bin=$baseline
            fi
            timed "$b-table" "$bin" report "$dir"
            timed "$b-json" "$bin" report "$dir" --format json
            timed "$b-html" "$bin" report "$dir" --format html -o "$work/page.html"
            timed "$b-compare" "$bin" compare "$dir" "$dir"
        done
    done
    py=$(median python 1)
    printf '%9d %7ss' "$n" "$py"
    for b in "${binaries[@]}"; do
        if [ ! -s "$work/$b-table.times" ]; then
            printf ' | %-4s %s' "$b" "(not run above BASELINE_UPTO=$baseline_upto)"
            continue
        fi
        t=$(median "$b-table" 1)
        printf ' | %-4s %6ss %7s %6ss %6ss %6ss %13s' "$b" "$t" "$(ratio "$py" "$t")" \
            "$(median "$b-json" 1)" "$(median "$b-html" 1)" "$(median "$b-compare" 1)" \
            "$(mib "$(median "$b-table" 2)")/$(mib "$(median "$b-json" 2)")/$(mib "$(median "$b-html" 2)")/$(mib "$(median "$b-compare" 2)")"
    done
    echo
    rm -rf "$dir"
done
