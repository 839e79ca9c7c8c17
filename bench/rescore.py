"""`wt rescore --no-cache` at --jobs 1 and --jobs N against a judge that answers in 100 ms.

One pinned sweep of RUNS runs (an `openai` agent and a judge, both played by a local stub:
the agent's model answers at once, the judge after 100 ms) is copied twice and rescored with
every grading asked again, at --jobs 1 and at --jobs N. Prints the wall times, their ratio and
whether both copies came out byte-identical.
"""

import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

WT = os.environ["WT"]
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 304
JOBS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
DELAY = 0.1


class Stub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("model") == "grader":
            time.sleep(DELAY)
            content = '{"verdict": "pass", "reasoning": "It answers."}'
        else:
            content = "Your order 1234 has shipped."
        reply = json.dumps({
            "id": "c", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def files(d):
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    work = tempfile.mkdtemp(prefix="wt-rescore-bench-")
    pack = os.path.join(work, "pack")
    os.makedirs(os.path.join(pack, "scenarios"))
    with open(os.path.join(pack, "pack.toml"), "w") as f:
        f.write(f'name = "bench"\n[models.grader]\nprovider = "openai"\n'
                f'endpoint = "{base}"\nmodel = "grader"\nmax_concurrency = 64\n')
    with open(os.path.join(pack, "scenarios", "order.toml"), "w") as f:
        f.write(f'id = "order"\nruns = {RUNS}\nturns = ["Where is order 1234?"]\n'
                '[expect.outcome]\nreply_contains = ["shipped"]\n'
                '[[expect.judge]]\nmodel = "grader"\nrubric = "Says where the order is."\n')
    agent = os.path.join(work, "agent.toml")
    with open(agent, "w") as f:
        f.write(f'label = "bot"\nruntime = "openai"\nmodel = "bot"\nendpoint = "{base}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("WT_")}
    env["WT_FIXED_CLOCK"] = "2026-11-30T05:15:00Z"
    runs = os.path.join(work, "runs")
    subprocess.run([WT, "run", "--pack", pack, "--agent", agent, "--seed", "1",
                    "--jobs", "16", "--out", runs], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times, outputs = {}, {}
    for jobs in (1, JOBS):
        d = os.path.join(work, f"jobs{jobs}")
        shutil.copytree(runs, d)
        started = time.monotonic()
        done = subprocess.run([WT, "rescore", d, "--pack", pack, "--no-cache", "--seed", "1",
                               "--jobs", str(jobs)], env=env, check=True,
                              capture_output=True)
        times[jobs] = time.monotonic() - started
        outputs[jobs] = (done.stdout, done.stderr, files(d))
    same = outputs[1] == outputs[JOBS]
    print(f"rescore --no-cache of {RUNS} runs, judge answering in {DELAY * 1000:.0f} ms:")
    print(f"  --jobs 1: {times[1]:.2f} s   --jobs {JOBS}: {times[JOBS]:.2f} s   "
          f"ratio {times[JOBS] / times[1]:.3f}   byte-identical: {same}")
    shutil.rmtree(work)
    sys.exit(0 if same else 1)


main()
