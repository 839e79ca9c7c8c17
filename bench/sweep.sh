#!/usr/bin/env bash
# Benchmark (not a test): a one-turn sweep of RUNS runs (default 10,000) on the demo agent,
# against a floor that only writes the same number of files of the same sizes atomically
# (`write-floor` of bench/src, the same temp-file + rename as the runner). Prints both wall times,
# their ratio (the rail: at most 1.8 at --jobs 1), the same ratio paired (each sweep against the floor run
# just before it; the median), the user and system CPU of both per run (the floor's is mostly
# the kernel's: what is left to `wt` is its user time) and peak RSS at RUNS/10 and RUNS runs
# (target: flat).
#
#   bench/sweep.sh            # 10,000 runs
#   RUNS=2000 bench/sweep.sh
#   JOBS="1 8" bench/sweep.sh             # --jobs values to measure (default: 1 and 8)
#   BENCH_DIR=/mnt/fresh bench/sweep.sh   # where to write (default: $TMPDIR)
#   PROFILE=dist bench/sweep.sh           # the shipping build (target/dist) instead of release
#   BASELINE=/tmp/before/wt bench/sweep.sh   # also another build of wt, alternated with this
#                                          # one in the same sitting (before/after a change)
#
# Numbers are only stable on a filesystem without many recent deletions: ext4 makes inode
# allocation slow for a while after mass deletions (`recently_deleted`), which randomly
# penalises whichever side lands in such a block group. For stable numbers point BENCH_DIR
# at a fresh filesystem, e.g. (as root):
#   truncate -s 4G /tmp/b.img && mkfs.ext4 -q -F -N 800000 /tmp/b.img && mount -o loop /tmp/b.img /mnt/fresh
set -euo pipefail

RUNS=${RUNS:-10000}
JOBS=${JOBS:-1 8}
REPS=${REPS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
PROFILE=${PROFILE:-release}
(cd "$root" && cargo build -q --profile "$PROFILE" -p windtunnel --bin wt -p wt-bench --bin write-floor)
wt=$target/$PROFILE/wt
floor=$target/$PROFILE/write-floor

work=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/wt-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pack/scenarios"
cp "$root/host/packs/demo/pack.toml" "$work/pack/"
cp "$root/host/packs/demo/scenarios/order-status.toml" "$work/pack/scenarios/"

# Output directories are never deleted during the measurements: ext4 makes inode allocation
# slow right after many deletions (`recently_deleted`), which would skew whichever ran next.
fresh_dir() {
    mktemp -d "$work/out.XXXXXX"
}

# measure CMD... → prints "<seconds> <max RSS KiB> <user s> <system s>"
measure() {
    sync
    /usr/bin/time -f '%e %M %U %S' -o "$work/time" "$@" >/dev/null 2>&1
    cat "$work/time"
}

sweep() {
    measure "${4:-$wt}" run --pack "$work/pack" --runs "$1" --jobs "${3:-1}" --seed 1 --out "$2"
}

# File sizes of one run (all runs of this scenario have the same sizes).
probe=$(fresh_dir)
sweep 10 "$probe" >/dev/null
probe20=$(fresh_dir)
sweep 20 "$probe20" >/dev/null
# The sweep's event journal: lines per run (from a 10- and a 20-run sweep) and line size.
j10=$(cat "$probe"/*.events.jsonl 2>/dev/null | wc -l)
j20=$(cat "$probe20"/*.events.jsonl 2>/dev/null | wc -l)
journal_lines=$(( j10 + (j20 - j10) * (RUNS - 10) / 10 ))
journal_line_bytes=$(cat "$probe20"/*.events.jsonl 2>/dev/null | awk '{s+=length($0)+1} END {printf "%d", (NR ? s/NR : 0)}')
trace_bytes=$(find "$probe" -name '*.json' ! -name '*.*.json' -printf '%s\n' | awk '{s+=$1} END {printf "%d", s/NR}')
score_bytes=$(find "$probe" -name '*.score.json' -printf '%s\n' | awk '{s+=$1} END {printf "%d", s/NR}')

best_floor=999999 best_floor_j=999999 rss_full=0
declare -A best_sweep best_base ratios users systems
floor_users="" floor_systems=""
# The median of a list of numbers.
median() {
    tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'
}
for _ in $(seq "$REPS"); do
    read -r f_s _ < <(measure "$floor" --out "$(fresh_dir)" --count "$RUNS" \
        --trace-bytes "$trace_bytes" --score-bytes "$score_bytes")
    read -r fj_s _ fj_u fj_k < <(measure "$floor" --out "$(fresh_dir)" --count "$RUNS" \
        --trace-bytes "$trace_bytes" --score-bytes "$score_bytes" \
        --journal-lines "$journal_lines" --journal-line-bytes "$journal_line_bytes")
    floor_users+=" $fj_u" floor_systems+=" $fj_k"
    best_floor=$(awk -v a="$best_floor" -v b="$f_s" 'BEGIN {print (b < a ? b : a)}')
    best_floor_j=$(awk -v a="$best_floor_j" -v b="$fj_s" 'BEGIN {print (b < a ? b : a)}')
    for jobs in $JOBS; do
        out=$(fresh_dir)
        read -r s_s s_kb s_u s_k < <(sweep "$RUNS" "$out" "$jobs")
        # This sweep against the floor measured just before it: steadier than the two bests
        # when the machine's speed drifts during a sitting.
        ratios[$jobs]+=" $(awk -v s="$s_s" -v f="$fj_s" 'BEGIN {print (f > 0 ? s / f : 0)}')"
        users[$jobs]+=" $s_u" systems[$jobs]+=" $s_k"
        n=$(find "$out" -name '*.json' | wc -l)
        [ "$n" -eq $((RUNS * 2)) ] || { echo "expected $((RUNS * 2)) files, found $n" >&2; exit 1; }
        best_sweep[$jobs]=$(awk -v a="${best_sweep[$jobs]:-999999}" -v b="$s_s" 'BEGIN {print (b < a ? b : a)}')
        [ "$jobs" = 1 ] && rss_full=$s_kb
        if [ -n "${BASELINE:-}" ]; then
            read -r b_s _ < <(sweep "$RUNS" "$(fresh_dir)" "$jobs" "$BASELINE")
            best_base[$jobs]=$(awk -v a="${best_base[$jobs]:-999999}" -v b="$b_s" 'BEGIN {print (b < a ? b : a)}')
        fi
    done
done
read -r _ rss_tenth _ < <(sweep $((RUNS / 10)) "$(fresh_dir)")

echo "runs:            $RUNS (one turn each; trace $trace_bytes B, score $score_bytes B)"
echo "journal:         $journal_lines lines of ~$journal_line_bytes B, one write each"
echo "floor wall time: ${best_floor}s (traces + scores), ${best_floor_j}s (+ journal) (best of $REPS)"
for jobs in $JOBS; do
    b=${best_sweep[$jobs]}
    awk -v s="$b" -v f="$best_floor" -v j="$best_floor_j" -v jobs="$jobs" -v reps="$REPS" 'BEGIN {printf "sweep --jobs %-3s %ss (best of %s): %.2fx the floor of traces + scores; %.2fx the floor with the journal (the rail: <= 1.8x)\n", jobs, s, reps, (f > 0 ? s / f : 0), (j > 0 ? s / j : 0)}'
    awk -v r="$(median <<<"${ratios[$jobs]}")" -v u="$(median <<<"${users[$jobs]}")" -v k="$(median <<<"${systems[$jobs]}")" \
        -v fu="$(median <<<"$floor_users")" -v fk="$(median <<<"$floor_systems")" -v n="$RUNS" -v jobs="$jobs" \
        'BEGIN {printf "  --jobs %-3s paired (median of each repeat'"'"'s sweep / the floor with the journal just before it): %.2fx; CPU per run, user / system (medians): wt %.1f / %.1f us, the floor %.1f / %.1f us\n", jobs, r, u * 1e6 / n, k * 1e6 / n, fu * 1e6 / n, fk * 1e6 / n}'
done
if [ -n "${BASELINE:-}" ]; then
    for jobs in $JOBS; do
        awk -v s="${best_sweep[$jobs]}" -v b="${best_base[$jobs]}" -v jobs="$jobs" -v reps="$REPS" 'BEGIN {printf "baseline --jobs %-3s %ss (best of %s): this wt takes %.3fx the baseline'"'"'s time\n", jobs, b, reps, (b > 0 ? s / b : 0)}'
    done
fi
echo "peak RSS (--jobs 1): ${rss_tenth} KiB at $((RUNS / 10)) runs, ${rss_full} KiB at $RUNS runs"
