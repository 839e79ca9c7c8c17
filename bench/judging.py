"""The harness's own cost of a simulated user's turn and of a judge's call, against the same
model requests sent straight to the same mock by curl (bench/judging.sh).

Each sweep makes RUNS runs of one scenario on the `openai` runtime against a local mock
(bench/openai_floor.rs, which answers every completion at once):

- scripted: TURNS scripted turns a run (TURNS agent calls);
- simulated: a simulated user that never says its stop word, TURNS turns a run (TURNS user
  calls and TURNS agent calls);
- plain: one scripted turn a run; judged: the same, with a judge check of SAMPLES samples
  (a sweep asks for every grading).

The harness's cost of a simulated turn is (simulated - scripted) / (RUNS x TURNS): the same
agent calls, files and journal, plus the user's calls; against it, curl sends the user's
request RUNS x TURNS times (the request wt sent, captured at the mock). Likewise a judge call:
(judged - plain) / (RUNS x SAMPLES) against curl sending the judge's request as often. At
--jobs 16, curl runs as 16 processes side by side, each with its share on one connection.
Medians of REPEATS, alternated.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
TURNS, SAMPLES = 5, 5
wt, stub_bin = os.environ["WT"], os.environ["STUB"]
work = tempfile.mkdtemp(prefix="wt-judging-",
                        dir=os.environ.get("BENCH_DIR") or ("/dev/shm" if os.path.isdir("/dev/shm") else None))
env = {k: v for k, v in os.environ.items() if not k.startswith("WT_")}


def write(path, text):
    path = os.path.join(work, path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def start_stub(capture, content=None):
    e = dict(env)
    if content is not None:
        e["STUB_CONTENT"] = content
    p = subprocess.Popen([stub_bin, capture], stdout=subprocess.PIPE, env=e)
    port = int(p.stdout.readline().split()[1])
    return p, port


agent_capture = os.path.join(work, "agent.req")
user_capture = os.path.join(work, "user.req")
judge_capture = os.path.join(work, "judge.req")
agent_stub, agent_port = start_stub(agent_capture)
user_stub, user_port = start_stub(user_capture)
judge_stub, judge_port = start_stub(judge_capture, '{"verdict": "pass", "reasoning": "It says where the order is."}')

agent = write("agent.toml", f'label = "bench"\nruntime = "openai"\nmodel = "agent"\n'
              f'endpoint = "http://127.0.0.1:{agent_port}/v1"\n')
models = (f'name = "bench"\n\n[models.sim]\nprovider = "openai"\nmodel = "sim"\n'
          f'endpoint = "http://127.0.0.1:{user_port}/v1"\n\n'
          f'[models.grader]\nprovider = "openai"\nmodel = "grader"\n'
          f'endpoint = "http://127.0.0.1:{judge_port}/v1"\n')
turns = ", ".join(['"Where is my order 1234?"'] * TURNS)
packs = {
    "scripted": f'id = "s"\nruns = {runs}\nturns = [{turns}]\n',
    "simulated": (f'id = "s"\nruns = {runs}\n[user]\nmodel = "sim"\n'
                  f'instruction = "You are Dana; you want to know where order 1234 is."\nmax_turns = {TURNS}\n'),
    "plain": f'id = "s"\nruns = {runs}\nturns = ["Where is my order 1234?"]\n',
    "judged": (f'id = "s"\nruns = {runs}\nturns = ["Where is my order 1234?"]\n'
               f'[[expect.judge]]\nmodel = "grader"\nrubric = "The assistant says where order 1234 is."\nsamples = {SAMPLES}\n'),
}
for name, scenario in packs.items():
    write(f"{name}/pack.toml", models)
    write(f"{name}/scenarios/s.toml", scenario)


def sweep(name, jobs):
    out = tempfile.mkdtemp(prefix="out-", dir=work)
    cmd = [wt, "run", "--pack", os.path.join(work, name), "--agent", agent, "--jobs", str(jobs),
           "--seed", "1", "--out", out]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t
    shutil.rmtree(out)
    return wall


# One sweep of each first: the mocks capture the requests curl will send.
for name in packs:
    sweep(name, 1)


def curl_config(capture, port, n, name):
    raw = open(capture, "rb").read()
    head, body = raw.split(b"\r\n\r\n", 1)
    request_line, *header_lines = head.decode().split("\r\n")
    method, path, _ = request_line.split(" ")
    headers = [h for h in header_lines
               if h.split(":", 1)[0].strip().lower() not in ("host", "content-length")]
    q = lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    entry = "".join([f'url = "http://127.0.0.1:{port}{path}"\n', f"request = {q(method)}\n",
                     'header = "User-Agent:"\n'] + [f"header = {q(h)}\n" for h in headers]
                    + [f"data-binary = {q(body.decode())}\n", 'output = "/dev/null"\n'])
    return write(name, "next\n".join([entry] * n))


def direct(capture, port, calls, jobs):
    """curl sending `calls` requests as `jobs` processes side by side."""
    shares = [calls // jobs + (1 if i < calls % jobs else 0) for i in range(jobs)]
    configs = [curl_config(capture, port, n, f"curl-{os.path.basename(capture)}-{jobs}-{i}.cfg")
               for i, n in enumerate(shares) if n]
    t = time.perf_counter()
    ps = [subprocess.Popen(["curl", "--silent", "--show-error", "--fail", "--http1.1", "--config", c])
          for c in configs]
    for p in ps:
        assert p.wait() == 0
    return time.perf_counter() - t


results = {}
for _ in range(repeats):
    for jobs in (1, 16):
        for name in packs:
            results.setdefault((name, jobs), []).append(sweep(name, jobs))
        results.setdefault(("curl-user", jobs), []).append(
            direct(user_capture, user_port, runs * TURNS, jobs))
        results.setdefault(("curl-judge", jobs), []).append(
            direct(judge_capture, judge_port, runs * SAMPLES, jobs))

med = {k: statistics.median(v) for k, v in results.items()}
us = lambda s: f"{s * 1e6:.0f} us"
print(f"{runs} runs a sweep, {TURNS} simulated turns a run, {SAMPLES} judge samples a run; "
      f"medians of {repeats}")
for jobs in (1, 16):
    print(f"--jobs {jobs}:")
    turns_n, judge_n = runs * TURNS, runs * SAMPLES
    sim = (med[("simulated", jobs)] - med[("scripted", jobs)]) / turns_n
    cu = med[("curl-user", jobs)] / turns_n
    print(f"  simulated turn: {us(sim)} a turn in wt (simulated - scripted sweep) vs {us(cu)} "
          f"for its user request sent by curl: ratio {sim / cu:.2f}")
    jd = (med[("judged", jobs)] - med[("plain", jobs)]) / judge_n
    cj = med[("curl-judge", jobs)] / judge_n
    print(f"  judge call:     {us(jd)} a call in wt (judged - plain sweep) vs {us(cj)} "
          f"for its request sent by curl: ratio {jd / cj:.2f}")
    print(f"  sweeps: scripted {med[('scripted', jobs)]:.2f} s, simulated {med[('simulated', jobs)]:.2f} s, "
          f"plain {med[('plain', jobs)]:.2f} s, judged {med[('judged', jobs)]:.2f} s")

for p in (agent_stub, user_stub, judge_stub):
    p.kill()
shutil.rmtree(work)
