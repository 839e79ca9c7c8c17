#!/usr/bin/env bash
# Benchmark (not a test; it asserts nothing): `wt view` at scale, against `wt report` on the
# same directory. For each size, a runs directory made by the real `wt run` as
# bench/report_scale.sh makes it (scenario order-status, half the runs passing by `demo`,
# half failing by `demo-forbidden-tool`), then REPEATS rounds of
#
#   wt report DIR                    wall time and peak RSS (/usr/bin/time)
#   wt view DIR --port 0             started cold; then, through curl:
#     first page   GET /             from the start of the process to the page's last byte
#     filtered     GET /?verdict=fail&offset=5000          (filters in memory)
#     free text    GET /?q=goodwill&verdict=fail           (reads the failing runs' traces)
#     again        GET /?q=goodwill&verdict=fail&offset=50 (the answer kept)
#     other sort   GET /?q=goodwill&verdict=fail&sort=cost (the text answer kept, re-sorted)
#     run page     GET /runs/<id> of the last run the failing sweep wrote (its events read
#                  from its journal)
#   and the server's peak RSS (VmHWM) once it has answered them all.
#
# Prints the medians, and the first page's time over `wt report`'s. With BASELINE=<a wt
# binary> (another build), each round measures it too on the same directory, alternating, and
# a second line per size gives its figures and this build's ratios to them (baseline / this).
#
#   bench/view.sh                              # 10,000 … 1,000,000 runs
#   SIZES="10000 100000" REPEATS=5 bench/view.sh
#   BASELINE=/tmp/wt-before SIZES=100000 bench/view.sh
#   BENCH_DIR=/mnt/fast bench/view.sh          # where the runs go (default /dev/shm, a tmpfs)
#
# Disk: about 11 KiB a run on tmpfs, so 1,000,000 runs need about 11 GiB; a size that does
# not fit is skipped with a note.
set -euo pipefail

SIZES=${SIZES:-"10000 100000 1000000"}
REPEATS=${REPEATS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build -q --release -p windtunnel --bin wt)
wt=$target/release/wt

work=$(mktemp -d "${BENCH_DIR:-/dev/shm}/wt-view.XXXXXX")
view_pid=
cleanup() {
    [ -n "$view_pid" ] && kill "$view_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.3f", b - a}'; }

# median FILE FIELD
median() {
    awk -v f="$2" '{print $f}' "$1" | sort -g |
        awk '{v[NR]=$1} END {if (NR == 0) print "-"; else print v[int((NR+1)/2)]}'
}
mib() { awk -v k="$1" 'BEGIN {if (k == "-") print "-"; else printf "%.0f", k / 1024}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b <= 0) print "-"; else printf "%.2fx", a / b}'; }

# fetch URL: milliseconds until the whole answer is read (fails the script on a non-200)
fetch() {
    local t
    t=$(curl -sS -o /dev/null -w '%{http_code} %{time_total}' "$1")
    [ "${t%% *}" = 200 ] || { echo "GET $1: ${t%% *}" >&2; exit 1; }
    awk -v s="${t#* }" 'BEGIN {printf "%.1f", s * 1000}'
}

# measure WT DIR N TAG: one round of every figure for binary WT, appended to $work/TAG.times
# ("report_s report_kib first filtered text again sort runpage view_kib")
measure() {
    local bin=$1 dir=$2 n=$3 tag=$4 start first url id
    /usr/bin/time -f '%e %M' -o "$work/time" "$bin" report "$dir" >/dev/null 2>&1 || true
    local report
    report=$(tail -n 1 "$work/time")
    : >"$work/url"
    start=$(now)
    "$bin" view "$dir" --port 0 >"$work/url" 2>"$work/view.err" &
    view_pid=$!
    until grep -q '/$' "$work/url" 2>/dev/null; do
        kill -0 "$view_pid" 2>/dev/null || { echo "wt view ended: $(cat "$work/view.err")" >&2; exit 1; }
        sleep 0.01
    done
    url=$(head -n 1 "$work/url")
    curl -sS -o /dev/null "$url"
    first=$(since "$start")
    local filtered text again sort runpage hwm
    filtered=$(fetch "${url}?verdict=fail&offset=5000")
    text=$(fetch "${url}?q=goodwill&verdict=fail")
    again=$(fetch "${url}?q=goodwill&verdict=fail&offset=50")
    sort=$(fetch "${url}?q=goodwill&verdict=fail&sort=cost")
    id=$(curl -sS "${url}api/runs?verdict=fail&offset=$(( n / 2 - 1 ))&limit=1" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["run_id"])')
    runpage=$(fetch "${url}runs/$id")
    hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$view_pid/status")
    kill "$view_pid"
    wait "$view_pid" 2>/dev/null || true
    view_pid=
    echo "$report $first $filtered $text $again $sort $runpage $hwm" >>"$work/$tag.times"
}

# row TAG N LABEL: the medians of TAG's rounds
row() {
    local f=$work/$1.times rt first
    rt=$(median "$f" 1)
    first=$(median "$f" 3)
    printf '%9s | %8ss %6s | %10ss %8s %11s %11s %9s %10s %9s %6s\n' "$3" "$rt" "$(mib "$(median "$f" 2)")" \
        "$first" "$(ratio "$first" "$rt")" "$(median "$f" 4)" "$(median "$f" 5)" \
        "$(median "$f" 6)" "$(median "$f" 7)" "$(median "$f" 8)" "$(mib "$(median "$f" 9)")"
}

# ratios N: baseline / this build, per figure (times and memory)
ratios() {
    local a=$work/base.times b=$work/this.times out="" i
    for i in 1 2 3 4 5 6 7 8 9; do
        out="$out $(ratio "$(median "$a" "$i")" "$(median "$b" "$i")")"
    done
    echo "$1 runs, baseline / this build: report $(echo "$out" | awk '{print $1}') (RSS $(echo "$out" | awk '{print $2}')), first page $(echo "$out" | awk '{print $3}'), filtered $(echo "$out" | awk '{print $4}'), text $(echo "$out" | awk '{print $5}'), again $(echo "$out" | awk '{print $6}'), other sort $(echo "$out" | awk '{print $7}'), run page $(echo "$out" | awk '{print $8}'), view RSS $(echo "$out" | awk '{print $9}')"
}

echo "wt: $wt; $REPEATS round(s) per size, medians; $(nproc) CPU(s); $(date -u +%Y-%m-%dT%H:%MZ)"
printf '%9s | %-17s | %-11s %8s %11s %11s %9s %10s %9s %6s\n' runs "wt report s  MiB" "first page" "/report" "filtered ms" "text ms" "again ms" "sort ms" "run ms" "MiB"

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
        measure "$wt" "$dir" "$n" this
        if [ -n "${BASELINE:-}" ]; then
            measure "$BASELINE" "$dir" "$n" base
        fi
    done
    row this "$n" "$n"
    if [ -n "${BASELINE:-}" ]; then
        row base "$n" "baseline"
        ratios "$n"
    fi
    rm -rf "$dir"
done
