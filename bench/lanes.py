"""Lane efficiency: one scenario x RUNS runs against a local agent that answers in 50 ms,
at --jobs 1, 8 and 32, for the `http` runtime (max_sessions = 64), the `a2a` runtime (a
remote A2A 1.0 agent, max_sessions = 64) and the `openai` runtime (against a local
OpenAI-compatible stub), and the same with `--hook debrief` on a failing
scenario (one 50 ms converse per run). Efficiency = ideal / measured wall time, where ideal
is (model calls x 50 ms) / jobs. Optionally inspect_ai on the same stub (skipped when the
`inspect_ai` package is absent).

Usage: python3 bench/lanes.py [RUNS] [JOBS,...]    (after bench/lanes.sh built wt)
AGENTS (default http,a2a,openai) picks the runtimes.
SAMPLES (default 1000) sets the side-by-side's sample count.
"""
import json
import os
import socket
import urllib.request
import subprocess
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
wt = os.path.join(root, "target", "release", "wt")
runs = int(sys.argv[1]) if len(sys.argv) > 1 else 640
jobs_list = [int(j) for j in (sys.argv[2] if len(sys.argv) > 2 else "1,8,32").split(",")]
delay = 0.05
samples = int(os.environ.get("SAMPLES", "1000"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


port = free_port()
stub = subprocess.Popen(
    [sys.executable, os.path.join(root, "bench", "agent_stub.py"), str(port), str(delay)],
    stdout=subprocess.PIPE,
)
assert stub.stdout.readline().strip() == b"ready"
base = f"http://127.0.0.1:{port}"
work = tempfile.mkdtemp(prefix="wt-lanes-", dir=os.environ.get("BENCH_DIR"))


def write(name, text):
    path = os.path.join(work, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


write("pack/pack.toml", 'name = "lanes"\n')
write("pack/scenarios/ask.toml", f'id = "ask"\nruns = {runs}\nturns = ["Where is order 1234?"]\n')
write("side/pack.toml", 'name = "side"\n')
write("side/scenarios/ask.toml", f'id = "ask"\nruns = {samples}\nturns = ["Where is order 1234?"]\n')
write("failing/pack.toml", 'name = "failing"\n')
write(
    "failing/scenarios/refund.toml",
    f'id = "refund"\nruns = {runs}\nturns = ["Refund order 1234."]\n'
    '[expect.outcome]\nreply_contains = ["refund"]\n',
)
agents = {
    "http": write(
        "http.toml",
        f'label = "svc"\nruntime = "http"\nendpoint = "{base}"\nmax_sessions = 64\n',
    ),
    "a2a": write(
        "a2a.toml",
        f'label = "a2a"\nruntime = "a2a"\nurl = "{base}"\nmax_sessions = 64\n',
    ),
    "openai": write(
        "openai.toml",
        f'label = "m"\nruntime = "openai"\nmodel = "m"\nendpoint = "{base}/v1"\n',
    ),
}


def answers():
    """How many model answers the stub has given so far."""
    with urllib.request.urlopen(f"{base}/count") as r:
        return json.load(r)["answers"]


def sweep(agent, jobs, pack, hooks=()):
    out = tempfile.mkdtemp(dir=work)
    cmd = [wt, "run", "--jobs", str(jobs), "--pack", os.path.join(work, pack), "--agent",
           agents[agent], "--out", out, *hooks]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WT_")}
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t


print(f"one scenario x {runs} runs, agent answers in {delay * 1000:.0f} ms")
for agent in [a for a in ("http", "a2a", "openai") if a in os.environ.get("AGENTS", "http,a2a,openai").split(",")]:
    for label, pack, hooks, calls in (
        ("", "pack", (), 1),
        (" + debrief", "failing", ("--hook", "debrief"), 2),
    ):
        for jobs in jobs_list:
            before = answers()
            wall = sweep(agent, jobs, pack, hooks)
            assert answers() - before == runs * calls, "every run made its model calls"
            ideal = runs * calls * delay / jobs
            print(f"  {agent:<6}{label:<10} --jobs {jobs:<3} {wall:7.2f} s  "
                  f"ideal {ideal:6.2f} s  efficiency {ideal / wall:.2f}")

# inspect_ai side by side, from the interpreter that has it (bench/lanes.sh installs it into
# target/bench-venv when pip can reach it; INSPECT_PYTHON overrides).
venv_python = os.path.join(root, "target", "bench-venv", "bin", "python")
inspect_python = os.environ.get(
    "INSPECT_PYTHON", venv_python if os.path.exists(venv_python) else sys.executable
)
has_inspect = subprocess.run(
    [inspect_python, "-c", "import inspect_ai"], capture_output=True
).returncode == 0
if not has_inspect:
    print("inspect_ai: not installed (pip install inspect-ai); side-by-side skipped")
else:
    script = write("inspect_task.py", f'''
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

@task
def ask():
    samples = [Sample(id=i, input="Where is order 1234?", target="shipped")
               for i in range({samples})]
    return Task(dataset=samples, solver=generate(), scorer=includes())
''')
    env = dict(os.environ, OPENAI_BASE_URL=f"{base}/v1", OPENAI_API_KEY="x")
    print(f"side by side with inspect_ai, {samples} one-turn samples on the same stub:")
    one = write("inspect_one.py", open(script).read().replace(f"range({samples})", "range(1)"))
    t = time.perf_counter()
    subprocess.run(
        [inspect_python, "-m", "inspect_ai", "eval", os.path.basename(one), "--model",
         "openai/m", "-M", "responses_api=false", "--log-dir", os.path.join(work, "inspect"),
         "--display", "none"],
        env=env, capture_output=True, cwd=work,
    )
    startup = time.perf_counter() - t
    print(f"  (inspect_ai's start-up, one sample: {startup:.2f} s; included below)")
    for jobs in jobs_list:
        before = answers()
        t = time.perf_counter()
        # The chat-completions API (inspect's openai provider defaults to the Responses API,
        # which this stub, like most OpenAI-compatible servers, does not serve).
        done = subprocess.run(
            [inspect_python, "-m", "inspect_ai", "eval", os.path.basename(script), "--model",
             "openai/m", "-M", "responses_api=false", "--max-connections", str(jobs),
             "--log-dir", os.path.join(work, "inspect"), "--display", "none"],
            env=env, capture_output=True, text=True, cwd=work,
        )
        inspect_wall = time.perf_counter() - t
        made = answers() - before
        if done.returncode != 0 or made != samples:
            # inspect exits 0 even when its eval errored: the stub's count is the proof.
            print(f"  inspect_ai failed (exit {done.returncode}, {made} of {samples} calls made): "
                  f"{(done.stderr or done.stdout).strip()[-300:]}")
            break
        before = answers()
        wt_wall = sweep("openai", jobs, "side")
        assert answers() - before == samples, "wt made every call"
        print(f"  --max-connections = --jobs = {jobs:<3} inspect_ai {inspect_wall:6.2f} s, "
              f"wt {wt_wall:6.2f} s, ratio inspect_ai / wt {inspect_wall / wt_wall:.2f}")

stub.terminate()
subprocess.run(["rm", "-rf", work])
