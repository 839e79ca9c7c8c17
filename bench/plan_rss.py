#!/usr/bin/env python3
"""Benchmark (not a test): peak memory of `wt run` against the number of runs planned.

For each planned size (default 10^3, 10^5, 10^7 runs of a one-scenario pack on the demo
agent, plus 10^7 with `--shard 1/2`), starts the sweep, lets it run for WINDOW seconds (or
to its end), sends SIGTERM, and reports the peak RSS of `wt` and of its sweep process
(the largest `ru_maxrss` among the waited-for processes), how long the stop took, and the
exit code (130 when interrupted). Memory must not grow with the number of runs planned.

    python3 bench/plan_rss.py                       # this checkout's release build
    WT_BASELINE=/tmp/before/wt python3 bench/plan_rss.py   # and another build, alternated
    SIZES="1000 100000" WINDOW=3 BENCH_DIR=/dev/shm python3 bench/plan_rss.py
"""

import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
SIZES = [int(s) for s in os.environ.get("SIZES", "1000 100000 10000000").split()]
WINDOW = float(os.environ.get("WINDOW", "3"))


def measure(wt, pack, out, runs, shard):
    """Runs one sweep in a fresh process tree; returns (peak RSS MiB, stop s, exit)."""
    # A child python measures its own waited-for descendants, so each figure is this
    # sweep's alone.
    code = f"""
import resource, signal, subprocess, sys, time
args = {[str(wt), "run", "--pack", str(pack), "--runs", str(runs), "--out", str(out)] + (["--shard", shard] if shard else [])!r}
p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    p.wait(timeout={WINDOW})
    stop = 0.0
except subprocess.TimeoutExpired:
    t = time.monotonic()
    p.send_signal(signal.SIGTERM)
    p.wait()
    stop = time.monotonic() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(rss, stop, p.returncode)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rss, stop, rc = r.stdout.split()
    return float(rss), float(stop), int(rc)


def main():
    subprocess.run(
        ["cargo", "build", "-q", "--release", "-p", "windtunnel", "--bin", "wt"],
        cwd=ROOT,
        check=True,
    )
    builds = [("this", TARGET / "release" / "wt")]
    if os.environ.get("WT_BASELINE"):
        builds.append(("baseline", pathlib.Path(os.environ["WT_BASELINE"])))
    base = os.environ.get("BENCH_DIR") or os.environ.get("TMPDIR") or "/tmp"
    work = pathlib.Path(tempfile.mkdtemp(prefix="wt-plan.", dir=base))
    try:
        pack = work / "pack"
        (pack / "scenarios").mkdir(parents=True)
        shutil.copy(ROOT / "host/packs/demo/pack.toml", pack)
        shutil.copy(ROOT / "host/packs/demo/scenarios/order-status.toml", pack / "scenarios")
        cases = [(n, None) for n in SIZES] + [(SIZES[-1], "1/2")]
        print(f"{'planned':>12} {'shard':>5}  {'build':<8} {'peak RSS':>9} {'stop':>7} {'exit':>4}")
        for n, shard in cases:
            for label, wt in builds:
                out = work / f"out-{label}-{n}-{shard or 'all'}".replace("/", "_")
                rss, stop, rc = measure(wt, pack, out, n, shard)
                print(f"{n:>12} {shard or '-':>5}  {label:<8} {rss:>7.1f} M {stop:>6.2f}s {rc:>4}", flush=True)
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
