"""A turn through the `a2a` runtime against the official Python SDK's server, vs the same
request sent by curl: N one-turn runs (`--jobs 1`, a remote agent: tests/agents/a2a_sdk_agent.py
without a world) and N curl requests of the same JSON-RPC `SendMessage`, each in a fresh
context. Prints the medians and the ratio wt / curl of
- the exchange: the A2A call's latency in the trace vs curl's own `time_total`, and
- the turn: the trace's turn latency (what a verdict waits for) vs curl's `time_total`, and
- a whole run: the sweep's wall time per run (`--jobs 1`) vs curl's `time_total`.

Usage: python3 bench/a2a.py [N]    (after bench/a2a.sh built wt and the agents' venv)
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
wt = os.path.join(root, "target", "release", "wt")
python = os.path.join(root, "target", "py-agents", "bin", "python")
n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
text = "Where is order 1234?"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


port = free_port()
base = f"http://127.0.0.1:{port}"
agent = subprocess.Popen(
    [python, os.path.join(root, "tests", "agents", "a2a_sdk_agent.py"), "--port", str(port), "--no-mcp"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
try:
    deadline = time.time() + 30
    while True:
        try:
            urllib.request.urlopen(f"{base}/.well-known/agent-card.json").read()
            break
        except OSError:
            if time.time() > deadline:
                sys.exit("the SDK's server did not start")
            time.sleep(0.1)

    # curl: the same request, one process each, its own clock.
    curl = []
    for i in range(n + 5):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": f"m{i}", "role": "ROLE_USER", "contextId": f"bench-{i}", "parts": [{"text": text}]}}})
        out = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{time_total}", "-X", "POST", f"{base}/",
             "-H", "content-type: application/json", "-H", "A2A-Version: 1.0", "-d", body],
            capture_output=True, text=True, check=True,
        )
        if i >= 5:  # warm-up
            curl.append(float(out.stdout) * 1000)

    work = tempfile.mkdtemp(prefix="wt-a2a-bench-")
    os.makedirs(os.path.join(work, "pack", "scenarios"))
    with open(os.path.join(work, "pack", "pack.toml"), "w") as f:
        f.write('name = "a2a-bench"\n')
    with open(os.path.join(work, "pack", "scenarios", "ask.toml"), "w") as f:
        f.write(f'id = "ask"\nruns = {n}\nturns = ["{text}"]\n')
    with open(os.path.join(work, "agent.toml"), "w") as f:
        f.write(f'label = "sdk"\nruntime = "a2a"\nurl = "{base}"\n')
    out = os.path.join(work, "runs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WT_")}
    t = time.perf_counter()
    subprocess.run([wt, "run", "--jobs", "1", "--pack", os.path.join(work, "pack"), "--agent",
                    os.path.join(work, "agent.toml"), "--out", out],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    wall = time.perf_counter() - t
    calls, turns = [], []
    for name in os.listdir(out):
        if name.endswith(".json") and "." not in name[:-5]:
            trace = json.load(open(os.path.join(out, name)))
            calls.append(trace["a2a"]["calls"][0]["latency_ms"])
            turns.append(trace["turns"][0]["latency_ms"])
    assert len(calls) == n, f"{len(calls)} traces of {n} runs"
finally:
    agent.kill()

c, a, tr = statistics.median(curl), statistics.median(calls), statistics.median(turns)
print(f"{n} one-turn requests to the a2a-sdk 1.3 server (SendMessage, 1.0, a completed task each)")
print(f"  curl time_total           median {c:6.2f} ms")
print(f"  wt A2A call (trace)       median {a:6.2f} ms   ratio wt/curl {a / c:.2f}")
print(f"  wt turn (trace)           median {tr:6.2f} ms   ratio wt/curl {tr / c:.2f}")
print(f"  wt sweep wall per run            {wall / n * 1000:6.2f} ms   ratio wt/curl {wall / n * 1000 / c:.2f}"
      "   (a whole run: context, trace, score, files)")
print("  (the trace's latencies are whole milliseconds; curl opens a connection per request, wt keeps one)")
