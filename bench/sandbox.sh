#!/usr/bin/env bash
# Benchmark (not a test): what confinement (docs/sandbox.md) costs, against `--sandbox off`,
# measured in one sitting, alternating the two so both see the same machine.
#
# 1. Per process start: RUNS runs of a one-turn session-mode agent (/bin/sh, then Python)
#    and of a one-shot agent (/bin/sh): wall time per run, confined against unconfined.
# 2. The sweep users live in: SWEEP runs of a one-shot agent (Python) at the runtime's
#    default --jobs: wall time, confined against unconfined (the rail: within 1.05x).
#
#   bash bench/sandbox.sh
#   RUNS=500 SWEEP=2000 REPEATS=5 bash bench/sandbox.sh
set -euo pipefail

RUNS=${RUNS:-200}
SWEEP=${SWEEP:-1000}
REPEATS=${REPEATS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
cd "$root"
cargo build -q --release -p windtunnel --bin wt
wt=$target/release/wt

work=$(mktemp -d "${TMPDIR:-/tmp}/wt-bench-sandbox.XXXXXX")
trap 'rm -rf "$work"' EXIT
pack() { # pack DIR RUNS
    mkdir -p "$1/scenarios"
    echo 'name = "bench"' > "$1/pack.toml"
    printf 'id = "one"\nruns = %s\nturns = ["hi"]\n[expect.outcome]\nreply_contains = ["ok"]\n' "$2" \
        > "$1/scenarios/one.toml"
}
pack "$work/starts" "$RUNS"
pack "$work/sweep" "$SWEEP"
py=$(python3 -c 'import sys; print(sys.executable)')
cat > "$work/session.sh" <<'SH'
while read -r line; do
    turn=$(printf '%s' "$line" | sed 's/.*"turn":\([0-9]*\).*/\1/')
    printf '{"type":"reply","turn":%s,"text":"ok"}\n' "$turn"
done
SH
cat > "$work/session.py" <<'PY'
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    print(json.dumps({"type": "reply", "turn": msg["turn"], "text": "ok"}), flush=True)
PY
agent() { # agent NAME COMMAND...
    local name=$1; shift
    local cmd
    cmd=$(printf '"%s", ' "$@")
    printf 'label = "%s"\nruntime = "process"\nmcp = false\ncommand = [%s]\n' "$name" "${cmd%, }" \
        > "$work/$name.toml"
}
agent session-sh /bin/sh "$work/session.sh"
agent session-py "$py" "$work/session.py"
agent oneshot-sh /bin/sh -c 'echo ok' '{input}'
agent oneshot-py "$py" -c "import sys; sys.stdout.write('ok')" '{input}'

# wall MODE AGENT PACK [ARGS...]: seconds of one sweep.
wall() {
    local mode=$1 agent=$2 pack=$3; shift 3
    local out="$work/out-$RANDOM$RANDOM"
    local start end
    start=$(date +%s.%N)
    "$wt" run --sandbox "$mode" --pack "$pack" --agent "$work/$agent.toml" --out "$out" "$@" \
        >/dev/null 2>&1 || { echo "sweep failed: $mode $agent" >&2; exit 1; }
    end=$(date +%s.%N)
    rm -rf "$out"
    echo "$end - $start" | bc -l
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

compare() { # compare LABEL AGENT PACK N [ARGS...]
    local label=$1 agent=$2 pack=$3 n=$4; shift 4
    local on=() off=()
    for _ in $(seq "$REPEATS"); do
        off+=("$(wall off "$agent" "$pack" "$@")")
        on+=("$(wall auto "$agent" "$pack" "$@")")
    done
    local m_off m_on
    m_off=$(printf '%s\n' "${off[@]}" | median)
    m_on=$(printf '%s\n' "${on[@]}" | median)
    printf '%-34s off %7.2f ms/run   confined %7.2f ms/run   ratio %.3f\n' "$label" \
        "$(echo "$m_off * 1000 / $n" | bc -l)" "$(echo "$m_on * 1000 / $n" | bc -l)" \
        "$(echo "$m_on / $m_off" | bc -l)"
}

echo "== 1. per process start ($RUNS runs, --jobs 1, medians of $REPEATS)"
compare "session mode, /bin/sh" session-sh "$work/starts" "$RUNS" --jobs 1
compare "session mode, Python" session-py "$work/starts" "$RUNS" --jobs 1
compare "one-shot, /bin/sh" oneshot-sh "$work/starts" "$RUNS" --jobs 1
echo "== 2. a sweep of $SWEEP one-shot Python runs at the default --jobs (medians of $REPEATS)"
compare "one-shot sweep, Python" oneshot-py "$work/sweep" "$SWEEP"
