"""Cost per turn of 4 active no-op turn observers (a real plugin, loaded by the real `wt`),
as a ratio to the same sweep without them. Both sweeps run in this one invocation,
alternating, and the median of each is compared.

Usage: python3 bench/turn_hooks.py [RUNS] [REPEATS]   (after bench/turn_hooks.sh built things)
BENCH_DIR picks where the runs directories go (default: the system temp dir); a tmpfs such as
/dev/shm keeps file-system noise out of a cost measured in microseconds.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
wt = os.path.join(root, "target", "release", "wt")
plugins = os.path.join(root, "target", "release")
runs = sys.argv[1] if len(sys.argv) > 1 else "2000"
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
# escalate-human has two turns per run.
turns = int(runs) * 2
hooks = []
for i in range(4):
    hooks += ["--hook", f"tnoop{i}"]


def sweep(with_hooks):
    out = tempfile.mkdtemp(prefix="wt-bench-", dir=os.environ.get("BENCH_DIR"))
    cmd = [wt, "run", "--jobs", "1", "--runs", runs, "--filter", "escalate-human", "--out", out]
    if with_hooks:
        cmd += hooks + ["--plugin-dir", plugins]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WT_")}
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    elapsed = time.perf_counter() - t
    subprocess.run(["rm", "-rf", out], check=True)
    return elapsed


base, with_ = [], []
sweep(False)
for _ in range(repeats):
    base.append(sweep(False))
    with_.append(sweep(True))
b, w = statistics.median(base), statistics.median(with_)
print(f"sweep of {runs} runs ({turns} turns), median of {repeats}:")
print(f"  without turn observers: {b:.3f} s  ({b / turns * 1e6:.1f} us/turn)")
print(f"  with 4 no-op observers: {w:.3f} s  ({w / turns * 1e6:.1f} us/turn)")
print(f"  cost per turn of 4 observers: {(w - b) / turns * 1e6:.1f} us")
print(f"  ratio with/without: {w / b:.3f}")
