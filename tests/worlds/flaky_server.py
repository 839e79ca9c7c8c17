"""A small stdio MCP server for the end-to-end suite, written on the wire protocol (no SDK)
so that it can misbehave in exactly the ways a world server can: it keeps notes in memory and
in `notes.txt` in its working directory, and some tools break it on purpose.

Tools: note {text}, notes (the state), ledger (the notes as text that is not JSON, the way
mcp-server-sqlite answers), reset, fail (a tool error), crash (exits), traceback (exits with
a long Python traceback whose last line is the cause), hang (never answers, with a
grandchild), garbage (writes a line that is not JSON), huge (a 9 MiB answer), env (the names
of its environment variables).

Environment:
  FLAKY_START  exit: say why on stderr and exit 2 before answering; traceback: write a long
               traceback and exit 1 before answering; silent: never answer
  FLAKY_LOG    a file to which each start appends the server's pid
  FLAKY_PIDS   where `hang` records its pid and its grandchild's
  FLAKY_HANG   METHOD[:N]: never answer METHOD (`initialize`, `tools/list`), in the Nth start
               and later ones (counted in FLAKY_LOG; default: every start)
"""

import json
import os
import subprocess
import sys
import time

NOTES = []

TOOLS = [
    {"name": "note", "description": "Keep a note.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "notes", "description": "The notes kept.", "inputSchema": {"type": "object"}},
    {"name": "reset", "description": "Forget every note.", "inputSchema": {"type": "object"}},
    {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object"}},
    {"name": "ledger", "description": "The notes, as text.", "inputSchema": {"type": "object"}},
    {"name": "crash", "description": "Exits.", "inputSchema": {"type": "object"}},
    {"name": "traceback", "description": "Exits with a traceback.", "inputSchema": {"type": "object"}},
    {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object"}},
    {"name": "garbage", "description": "Answers garbage.", "inputSchema": {"type": "object"}},
    {"name": "huge", "description": "Answers with 9 MiB.", "inputSchema": {"type": "object"}},
    {"name": "env", "description": "The names of its environment variables.", "inputSchema": {"type": "object"}},
]


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def text(value, error=False):
    return {"content": [{"type": "text", "text": json.dumps(value)}], "isError": error}


def traceback_exit(status):
    """A traceback like Python's, longer than a message quotes: the cause is its last line."""
    lines = ["Traceback (most recent call last):"]
    for i in range(40):
        lines.append(f'  File "/srv/ledger/handlers/layer_{i:02}.py", line {100 + i}, in dispatch_{i:02}')
        lines.append(f"    return await self.next_{i:02}(request)")
    lines.append("AttributeError: 'Server' object has no attribute 'list_resources'")
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    os._exit(status)


def call(name, args):
    if name == "note":
        NOTES.append(args["text"])
        with open("notes.txt", "a") as f:
            f.write(args["text"] + "\n")
        return text(len(NOTES))
    if name == "notes":
        return text({"notes": NOTES, "count": len(NOTES), "pid": os.getpid()})
    if name == "ledger":
        rows = [{"id": i + 1, "note": n} for i, n in enumerate(NOTES)]
        return {"content": [{"type": "text", "text": repr(rows)}], "isError": False}
    if name == "traceback":
        traceback_exit(1)
    if name == "reset":
        NOTES.clear()
        if os.path.exists("notes.txt"):
            os.remove("notes.txt")
        return text("reset")
    if name == "fail":
        return {"content": [{"type": "text", "text": "the ledger is closed on Sundays"}], "isError": True}
    if name == "crash":
        sys.stderr.write("flaky: segfault in the ledger (on purpose)\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "hang":
        child = subprocess.Popen(["sleep", "300"])
        with open(os.environ["FLAKY_PIDS"], "w") as f:
            json.dump({"pids": [os.getpid(), child.pid]}, f)
        while True:
            time.sleep(60)
    if name == "env":
        return text(sorted(os.environ))
    if name == "huge":
        return text("x" * (9 << 20))
    if name == "garbage":
        sys.stdout.write("<html>oops</html>\n")
        sys.stdout.flush()
        time.sleep(60)
    return None


def main():
    start = os.environ.get("FLAKY_START")
    starts = 1
    if os.environ.get("FLAKY_LOG"):
        with open(os.environ["FLAKY_LOG"], "a") as f:
            f.write(f"{os.getpid()}\n")
        with open(os.environ["FLAKY_LOG"]) as f:
            starts = len(f.read().split())
    hang, _, nth = os.environ.get("FLAKY_HANG", "").partition(":")
    if nth and starts < int(nth):
        hang = ""
    if start == "exit":
        sys.stderr.write("flaky: cannot open the ledger database\n")
        sys.exit(2)
    if start == "traceback":
        traceback_exit(1)
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if start == "silent" or "id" not in msg:
            continue
        method = msg.get("method")
        if method == hang:
            continue
        if method == "initialize":
            result = {"protocolVersion": msg["params"]["protocolVersion"],
                      "capabilities": {"tools": {}},
                      "serverInfo": {"name": "flaky", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            result = call(msg["params"]["name"], msg["params"].get("arguments") or {})
            if result is None:
                send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32602, "message": "unknown tool"}})
                continue
        else:
            send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no such method"}})
            continue
        send({"jsonrpc": "2.0", "id": msg["id"], "result": result})


if __name__ == "__main__":
    main()
