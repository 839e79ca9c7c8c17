"""In-sweep cost of active hooks: the same pinned demo sweep with and without hooks, on the real
`wt` and a real plugin, alternating in one invocation; medians compared. Unlike the dispatch
microbenchmark (back-to-back calls), this is the cost users live with: the hooks' calls among
everything else a run does, in wall time and in CPU time (wt's own, user + system).

Usage: python3 bench/hook_sweep.py [RUNS] [REPEATS] [CASE]   (after bench/hook_sweep.sh)
  CASE lifecycle: one no-op hook at all six lifecycle points (default)
  CASE eight:     eight no-op hooks (each at on_run_end) and the one at all six points
  CASE turns:     four no-op turn observers (a two-turn scenario)
BENCH_DIR picks where runs go (default: /dev/shm when it is a writable directory, else the system
temp dir): a tmpfs keeps the file system out of a cost measured in microseconds — on a disk, the
file system's own state (ext4 after mass deletions) moves a sweep by hundreds of microseconds a
run between one sweep and the next.
PROFILE=dist measures the build of `cargo build --profile dist` (target/dist) instead of release.
WT_BASELINE=/path/to/wt (with WT_BASELINE_PLUGINS, the directory of its no-op plugin) adds another
build of wt, alternated with this one in the same sitting: the before and after of a change.
"""
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
profile = os.environ.get("PROFILE", "release")
wt = os.path.join(root, "target", profile, "wt")
plugins = os.path.join(root, "target", profile)
runs = sys.argv[1] if len(sys.argv) > 1 else "10000"
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
case = sys.argv[3] if len(sys.argv) > 3 else "lifecycle"
if case == "turns":
    scenario, per_run, unit = "escalate-human", 2, "turn"
    hooks = [a for i in range(4) for a in ("--hook", f"tnoop{i}")]
elif case == "eight":
    scenario, per_run, unit = "order-status", 1, "run"
    hooks = [a for i in range(8) for a in ("--hook", f"noop{i}")] + ["--hook", "noopall"]
else:
    scenario, per_run, unit = "order-status", 1, "run"
    hooks = ["--hook", "noopall"]
units = int(runs) * per_run
bench_dir = os.environ.get("BENCH_DIR") or (
    "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
)


def sweep(with_hooks, wt=wt, plugins=plugins):
    out = tempfile.mkdtemp(prefix="wt-bench-", dir=bench_dir)
    cmd = [wt, "run", "--jobs", "1", "--runs", runs, "--filter", scenario, "--out", out]
    if with_hooks:
        cmd += hooks + ["--plugin-dir", plugins]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WT_")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user = after.ru_utime - before.ru_utime
    cpu = user + (after.ru_stime - before.ru_stime)
    subprocess.run(["rm", "-rf", out], check=True)
    return wall, cpu, user


baseline = os.environ.get("WT_BASELINE")
baseline_plugins = os.environ.get("WT_BASELINE_PLUGINS", os.path.dirname(baseline or ""))
base, with_, old_base, old_with = [], [], [], []
sweep(False)
for i in range(repeats):
    # The order within a pair alternates (with first on odd repeats), so that what a sweep
    # leaves the machine (a warmer page cache, a tmpfs to free) does not always favour one side.
    for with_hooks in ((False, True) if i % 2 == 0 else (True, False)):
        (with_ if with_hooks else base).append(sweep(with_hooks))
    if baseline:
        for with_hooks in ((False, True) if i % 2 == 0 else (True, False)):
            (old_with if with_hooks else old_base).append(sweep(with_hooks, baseline, baseline_plugins))
bw, bc = statistics.median(w for w, _, _ in base), statistics.median(c for _, c, _ in base)
ww, wc = statistics.median(w for w, _, _ in with_), statistics.median(c for _, c, _ in with_)
label = {
    "turns": "4 no-op turn observers",
    "eight": "9 no-op hooks (8 at on_run_end, 1 at every point)",
}.get(case, "1 no-op hook at every lifecycle point")
print(f"sweep of {runs} runs ({units} {unit}s), --jobs 1, median of {repeats}:")
print(f"  without hooks: {bw:.3f} s wall ({bw / units * 1e6:.1f} us/{unit}), {bc:.3f} s CPU")
print(f"  with {label}: {ww:.3f} s wall ({ww / units * 1e6:.1f} us/{unit}), {wc:.3f} s CPU")
print(f"  cost: {(ww - bw) / units * 1e6:.1f} us wall and {(wc - bc) / units * 1e6:.1f} us CPU per {unit}")
print(f"  ratio with/without: {ww / bw:.3f} wall, {wc / bc:.3f} CPU")
# Each repeat runs the two sweeps back to back (in alternating order): the median of their
# differences is steadier than the difference of the medians when the machine's speed drifts
# during the sitting.
pw = statistics.median(w[0] - b[0] for w, b in zip(with_, base))
pc = statistics.median(w[1] - b[1] for w, b in zip(with_, base))
pu = statistics.median(w[2] - b[2] for w, b in zip(with_, base))
print(f"  paired (median of the repeats' differences): {pw / units * 1e6:.1f} us wall and {pc / units * 1e6:.1f} us CPU per {unit}")
# The same pairs as ratios (what the goals bound), and the spread of the wall differences: a
# bound inside that spread is a bound the machine's noise decides, not the hooks.
rw = statistics.median(w[0] / b[0] for w, b in zip(with_, base))
rc = statistics.median(w[1] / b[1] for w, b in zip(with_, base))
print(f"  paired ratio (median of the repeats' ratios): {rw:.3f} wall, {rc:.3f} CPU")
if repeats >= 4:
    q1, _, q3 = statistics.quantiles([(w[0] - b[0]) / units * 1e6 for w, b in zip(with_, base)], n=4)
    print(f"  spread of the paired wall differences (quartiles): {q1:.1f} to {q3:.1f} us per {unit}")
# User CPU alone leaves out the kernel's side of writing the sweep's files (the larger part of
# a run's cost on a tmpfs, and the noisier): a hook's own cost is user time.
print(f"  paired user CPU only: {pu / units * 1e6:.1f} us per {unit}")
if baseline:
    obw, obc = statistics.median(w for w, _, _ in old_base), statistics.median(c for _, c, _ in old_base)
    oww, owc = statistics.median(w for w, _, _ in old_with), statistics.median(c for _, c, _ in old_with)
    print(f"baseline {baseline}, alternated with the above:")
    print(f"  without hooks: {obw:.3f} s wall, {obc:.3f} s CPU; this wt / baseline: {bw / obw:.3f} wall, {bc / obc:.3f} CPU")
    print(f"  with {label}: {oww:.3f} s wall, {owc:.3f} s CPU; this wt / baseline: {ww / oww:.3f} wall, {wc / owc:.3f} CPU")
    print(f"  baseline cost: {(oww - obw) / units * 1e6:.1f} us wall and {(owc - obc) / units * 1e6:.1f} us CPU per {unit}")
    opw = statistics.median(w[0] - b[0] for w, b in zip(old_with, old_base))
    opc = statistics.median(w[1] - b[1] for w, b in zip(old_with, old_base))
    opu = statistics.median(w[2] - b[2] for w, b in zip(old_with, old_base))
    print(f"  baseline paired: {opw / units * 1e6:.1f} us wall and {opc / units * 1e6:.1f} us CPU per {unit}; user CPU only {opu / units * 1e6:.1f} us")
