#!/usr/bin/env bash
# Benchmark (not a test): how many runs `wt run --until-decided` saves at --jobs 1, 8 and 32,
# on the demo agent against a baseline of its own (A/A: every scenario ends `not regressed`).
# A pack of SCENARIOS scenarios (default 30: the demo pack's three, copied) and one of three;
# --max-runs 20. Prints, per pack and --jobs, the runs planned, made, and saved.
#
#   bench/until_decided.sh
#   SCENARIOS=300 bench/until_decided.sh
#   WT=target/debug/wt bench/until_decided.sh     # a wt already built
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
if [ -n "${WT:-}" ]; then
    wt=$WT
else
    (cd "$root" && cargo build -q --release --bin wt)
    wt="$target/release/wt"
fi
work=$(mktemp -d -t wt-until-decided.XXXXXX)
trap 'rm -rf "$work"' EXIT

pack() { # pack DIR COPIES
    mkdir -p "$1/scenarios"
    cp "$root/host/packs/demo/pack.toml" "$1/"
    for k in $(seq 1 "$2"); do
        for f in "$root"/host/packs/demo/scenarios/*.toml; do
            id=$(basename "$f" .toml)
            sed "s/^id = \"$id\"/id = \"$id-$k\"/" "$f" > "$1/scenarios/$id-$k.toml"
        done
    done
}

scenarios=${SCENARIOS:-30}
pack "$work/big" $(( (scenarios + 2) / 3 ))
pack "$work/small" 1
printf '%-10s %6s %8s %6s %6s\n' pack jobs planned made saved
for p in small big; do
    "$wt" run --pack "$work/$p" --runs 20 --seed 1 --out "$work/base-$p" >/dev/null 2>&1
    for jobs in 1 8 32; do
        out="$work/new-$p-$jobs"
        line=$("$wt" run --pack "$work/$p" --baseline "$work/base-$p" --until-decided \
            --max-runs 20 --jobs "$jobs" --seed 2 --out "$out" 2>&1 | tee "$work/err" | grep "planned runs made" || true)
        [ -n "$line" ] || { cat "$work/err" >&2; exit 1; }
        made=$(echo "$line" | awk '{print $1}')
        planned=$(echo "$line" | awk '{print $3}')
        printf '%-10s %6s %8s %6s %5s%%\n' "$p" "$jobs" "$planned" "$made" \
            "$(( (planned - made) * 100 / planned ))"
    done
done
