"""A hostile program, as an agent or as a world server: it tries what a confined process must
not do and says what happened to each attempt. The end-to-end suite runs it with and without
`wt`'s sandbox (tests/e2e/sandbox.rs).

Usage: hostile.py agent          one-shot agent: prints the attempts as its JSON reply
       hostile.py world          MCP world server over stdio: its `state` tool returns them

Each attempt reads its target from the environment and is skipped when the variable is unset:
  HOSTILE_OUTSIDE    a path outside the run's directory to write
  HOSTILE_PLANTED    a credential file to read
  HOSTILE_BESIDE   a file beside it that may be read
  HOSTILE_PORT       a loopback port that is not the run's, to connect to
  HOSTILE_FORKS      how many processes to hold at once
  HOSTILE_ALLOC_GIB  how many GiB to allocate
"""

import errno
import json
import os
import socket
import sys


def said(e):
    name = errno.errorcode.get(getattr(e, "errno", None) or 0, type(e).__name__)
    return f"refused: {name}"


def attempts():
    out = {}
    env = os.environ
    if "HOSTILE_OUTSIDE" in env:
        try:
            with open(env["HOSTILE_OUTSIDE"], "w") as f:
                f.write("escaped")
            out["write_outside"] = "ok"
        except OSError as e:
            out["write_outside"] = said(e)
    try:
        path = os.path.join(env["WT_RUN_DIR"] if "WT_RUN_DIR" in env else os.getcwd(), "mine.txt")
        with open(path, "w") as f:
            f.write("mine")
        out["write_scratch"] = "ok"
    except OSError as e:
        out["write_scratch"] = said(e)
    for key, var in [("read_secret", "HOSTILE_PLANTED"), ("read_beside", "HOSTILE_BESIDE")]:
        if var in env:
            try:
                with open(env[var]) as f:
                    f.read()
                out[key] = "ok"
            except OSError as e:
                out[key] = said(e)
    if "HOSTILE_PORT" in env:
        try:
            s = socket.create_connection(("127.0.0.1", int(env["HOSTILE_PORT"])), timeout=5)
            s.close()
            out["connect_other_port"] = "ok"
        except OSError as e:
            out["connect_other_port"] = said(e)
    if "HOSTILE_FORKS" in env:
        want = int(env["HOSTILE_FORKS"])
        r, w = os.pipe()
        children = []
        failed = None
        for _ in range(want):
            try:
                pid = os.fork()
            except OSError as e:
                failed = e
                break
            if pid == 0:
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            children.append(pid)
        os.close(w)
        for pid in children:
            os.waitpid(pid, 0)
        os.close(r)
        out["fork"] = "ok" if failed is None else f"{said(failed)} after {len(children)}"
    if "HOSTILE_ALLOC_GIB" in env:
        try:
            block = bytearray(int(env["HOSTILE_ALLOC_GIB"]) << 30)
            del block
            out["allocate"] = "ok"
        except MemoryError as e:
            out["allocate"] = "refused: MemoryError"
    return out


if sys.argv[1:2] == ["agent"]:
    print(json.dumps({"attempted": attempts()}))
elif sys.argv[1:] == ["world"]:
    from mcp.server.mcpserver import MCPServer

    SEEN = attempts()
    server = MCPServer("hostile")

    @server.tool()
    def state() -> dict:
        """What the server's attempts came to."""
        return {"attempted": SEEN}

    server.run("stdio")
else:
    sys.exit(__doc__)
