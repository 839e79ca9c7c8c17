"""The `openai` runtime against its floor, the same HTTP exchanges sent by curl, all against the
same local stub (bench/openai_floor.rs: answers at once, no tool calls):
- curl: one process sending RUNS times the request `wt` sent (body and headers captured at
  the stub) on one keep-alive connection — the HTTP exchanges alone;
- the runtime alone (host/benches/openai_floor.rs): the agent's runtime provisioned for the
  scenario and sent its turn RUNS times in place, as the runner calls it — no runner, no files;
- `wt run --jobs 1` of RUNS one-turn runs with the `openai` agent: the whole sweep;
- the write floor of those runs (`write-floor` of bench/src: their traces, scores and journal lines, of
  the same sizes, written the way the runner writes them).
So a run's time splits into the runtime (its HTTP and the rest of its work), the files, and
the rest of the runner (scoring, serializing the trace, score and events). Sides alternate (the order rotates each repeat);
medians of REPEATS. Prints figures and ratios; asserts nothing, except that every side made
exactly its RUNS requests on one connection (else its figures would mean nothing).

Usage: python3 bench/openai_floor.py [RUNS] [REPEATS]     (after bench/openai_floor.sh built
wt and the stub; WT and STUB name them). BENCH_DIR: where runs go (default /dev/shm, a tmpfs,
so that the file system stays out of a cost measured in microseconds). BASELINE=/path/to/wt
adds another build of wt, alternated with this one: the before and after of a change.
"""
import http.client
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
wt = os.environ.get("WT", os.path.join(target, "release", "wt"))
floor_bin = os.environ.get("FLOOR", os.path.join(target, "release", "write-floor"))
stub_bin = os.environ.get("STUB", os.path.join(target, "release", "openai_floor_stub"))
runtime_bench = os.environ.get("RUNTIME_BENCH")
baseline = os.environ.get("BASELINE")
runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
bench_dir = os.environ.get("BENCH_DIR") or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
work = tempfile.mkdtemp(prefix="wt-openai-floor-", dir=bench_dir)
KEY = "sk-floor-0123456789abcdef"


def write(name, text):
    path = os.path.join(work, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


capture = os.path.join(work, "request.http")
stub = subprocess.Popen([stub_bin, capture], stdout=subprocess.PIPE)
ready = stub.stdout.readline().split()
assert ready[:1] == [b"ready"], ready
port = int(ready[1])
stats_conn = http.client.HTTPConnection("127.0.0.1", port)


def stats():
    """The stub's completions, connections and CPU so far (this connection is not counted
    in a side's figures: it stays open)."""
    stats_conn.request("GET", "/stats")
    return json.loads(stats_conn.getresponse().read())


# The demo pack's `order-status` (its three tools, its world), expecting what the stub
# answers, so that every run passes: one turn, one model call, no tool call.
demo = os.path.join(root, "host", "packs", "demo", "scenarios", "order-status.toml")
scenario = open(demo).read()
tools = scenario[scenario.index("[[tools]]"):scenario.index("[expect.outcome]")]
world = scenario[scenario.index("[world]"):]
write("pack/pack.toml", 'name = "floor"\n')
write(
    "pack/scenarios/ask.toml",
    'id = "ask"\nturns = ["Hi, where is my order 1234?"]\n\n' + tools
    + '[expect.outcome]\nreply_contains = ["shipped"]\n\n'
    + '[expect.constraint]\nforbidden_tools = ["issue_refund"]\n\n' + world,
)
agent = write(
    "agent.toml",
    'label = "floor"\nruntime = "openai"\nmodel = "m"\n'
    f'endpoint = "http://127.0.0.1:{port}/v1"\napi_key_env = "WT_FLOOR_KEY"\n'
    'soul = "You are the order-support agent of a small shop. Look orders up before answering, '
    'refund only damaged orders, and hand over to a human when asked."\n',
)
env = {k: v for k, v in os.environ.items()
       if not k.startswith(("WT_", "OPENAI_", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"))}
env["WT_FLOOR_KEY"] = KEY


def fresh():
    return tempfile.mkdtemp(prefix="out-", dir=work)


def wt_run(binary, n, out):
    return [binary, "run", "--pack", os.path.join(work, "pack"), "--agent", agent,
            "--runs", str(n), "--jobs", "1", "--seed", "1", "--out", out]


def measure(cmd):
    """Wall and CPU (user + system of the command and its children) seconds, and what the
    stub saw meanwhile: completions, connections, its own CPU seconds."""
    before_stub = stats()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    after_stub = stats()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    seen = {k: after_stub[k] - before_stub[k] for k in ("requests", "connections")}
    return wall, cpu, (after_stub["cpu_us"] - before_stub["cpu_us"]) / 1e6, seen


# What one run writes: a probe of 10 and of 20 runs (journal lines per run, their size).
def probe(n):
    out = fresh()
    subprocess.run(wt_run(wt, n, out), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=env)
    files = os.listdir(out)
    journal = [l for f in files if f.endswith(".events.jsonl")
               for l in open(os.path.join(out, f), "rb")]
    traces = [os.path.getsize(os.path.join(out, f)) for f in files
              if f.endswith(".json") and not f.endswith(".score.json")]
    scores = [os.path.getsize(os.path.join(out, f)) for f in files if f.endswith(".score.json")]
    shutil.rmtree(out)
    return journal, traces, scores


j10, traces, scores = probe(10)
j20, _, _ = probe(20)
assert len(traces) == 10 and os.path.exists(capture), "the probe runs made their calls"
journal_lines = len(j10) + (len(j20) - len(j10)) * (runs - 10) // 10
journal_line_bytes = sum(map(len, j20)) // max(len(j20), 1)
trace_bytes, score_bytes = sum(traces) // len(traces), sum(scores) // len(scores)

# curl's side: the captured request, RUNS times, in one curl process (one connection). curl
# sets Host and Content-Length itself; its own User-Agent goes, the rest is wt's.
raw = open(capture, "rb").read()
head, body = raw.split(b"\r\n\r\n", 1)
request_line, *header_lines = head.decode().split("\r\n")
method, path, _ = request_line.split(" ")
headers = [h for h in header_lines if h.split(":", 1)[0].strip().lower() not in ("host", "content-length")]


def quoted(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


entry = "".join(
    [f'url = "http://127.0.0.1:{port}{path}"\n', f"request = {quoted(method)}\n",
     'header = "User-Agent:"\n']
    + [f"header = {quoted(h)}\n" for h in headers]
    + [f"data-binary = {quoted(body.decode())}\n", 'output = "/dev/null"\n']
)
curl_config = write("curl.cfg", "next\n".join([entry] * runs))
curl = ["curl", "--silent", "--show-error", "--fail", "--http1.1", "--config", curl_config]
curl_version = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split()[1]

sides = {
    "curl": lambda: curl,
    "wt": lambda: wt_run(wt, runs, fresh()),
    "floor": lambda: [floor_bin, "--out", fresh(), "--count", str(runs),
                      "--trace-bytes", str(trace_bytes), "--score-bytes", str(score_bytes),
                      "--journal-lines", str(journal_lines),
                      "--journal-line-bytes", str(journal_line_bytes)],
}
if runtime_bench:
    sides["runtime"] = lambda: [runtime_bench, agent, os.path.join(work, "pack"), "ask", str(runs)]
if baseline:
    sides["baseline"] = lambda: wt_run(baseline, runs, fresh())
results = {name: [] for name in sides}
order = list(sides)
measure(sides["wt"]())  # warm: page cache, the stub's first connection
for rep in range(repeats):
    for name in order[rep % len(order):] + order[:rep % len(order)]:
        wall, cpu, stub_cpu, seen = measure(sides[name]())
        want = 0 if name == "floor" else runs
        if seen["requests"] != want or seen["connections"] != (1 if want else 0):
            sys.exit(f"{name}: {seen['requests']} requests on {seen['connections']} connections, "
                     f"expected {want} on {1 if want else 0}")
        results[name].append((wall, cpu, stub_cpu))
        for d in os.listdir(work):
            if d.startswith("out-"):
                shutil.rmtree(os.path.join(work, d))
stub.terminate()
shutil.rmtree(work)


def med(name, i):
    return statistics.median(r[i] for r in results[name])


def us(s):
    return s / runs * 1e6


print(f"{runs} one-turn runs (one model call each, no tool calls), --jobs 1, against a local stub "
      f"answering at once; medians of {repeats}, sides alternated; per request/run:")
print(f"  request {len(body)} B body, {len(headers) + 2} headers; trace {trace_bytes} B, score "
      f"{score_bytes} B, {journal_lines / runs:.0f} journal lines of ~{journal_line_bytes} B")
print(f"  {'':34} {'wall':>9} {'CPU':>9} {'stub CPU':>9}")
rows = [("curl " + curl_version + " (HTTP alone)", "curl")]
if runtime_bench:
    rows.append(("openai runtime alone", "runtime"))
rows.append(("wt run", "wt"))
if baseline:
    rows.append(("baseline wt run", "baseline"))
rows.append(("write floor (write-floor)", "floor"))
for label, name in rows:
    print(f"  {label:34} {us(med(name, 0)):7.1f}us {us(med(name, 1)):7.1f}us {us(med(name, 2)):7.1f}us")
cw, cc = med("curl", 0), med("curl", 1)
ww, wc = med("wt", 0), med("wt", 1)
fw, fc = med("floor", 0), med("floor", 1)
print(f"  {'wt run - write floor':34} {us(ww - fw):7.1f}us {us(wc - fc):7.1f}us")
if runtime_bench:
    rw, rc = med("runtime", 0), med("runtime", 1)
    print(f"  {'wt run - runtime - write floor':34} {us(ww - rw - fw):7.1f}us {us(wc - rc - fc):7.1f}us"
          "   (the runner: scoring, trace, score, events)")
    print(f"  runtime / curl: {rw / cw:.2f} wall, {rc / cc:.2f} CPU   (runtime - curl: "
          f"{us(rw - cw):+.1f} us wall, {us(rc - cc):+.1f} us CPU per request)")
print(f"  wt - curl: {us(ww - cw):+.1f} us wall, {us(wc - cc):+.1f} us CPU per request")
print(f"  wt / curl: {ww / cw:.2f} wall, {wc / cc:.2f} CPU")
print(f"  (wt - write floor) / curl: {(ww - fw) / cw:.2f} wall, {(wc - fc) / cc:.2f} CPU")
if baseline:
    bw, bc = med("baseline", 0), med("baseline", 1)
    print(f"  baseline {baseline}: this wt / baseline {ww / bw:.3f} wall, {wc / bc:.3f} CPU; "
          f"baseline / curl {bw / cw:.2f} wall, {bc / cc:.2f} CPU")
