"""An A2A server that answers wrongly, one way per --mode, for the a2a runtime's tests: what
`wt` must turn into one clear line, never a pass. Plain http.server, no SDK: the faults are
the point. Listens on --port (else WT_A2A_PORT).

Modes:
  card-not-json   the card is an HTML page
  no-interface    the card names no interface
  rpc-error       every send answers JSON-RPC error -32601 (method not found)
  agent-error     every send answers JSON-RPC error -32603 (internal error)
  task-changes    a stream whose second event is about another task
  stream-cut      a stream cut in the middle of its second event
  huge-artifact   a completed task with a 10 MB text artifact
  silent          the send is read and never answered
  other-origin    the card sends its calls to another host
"""

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=int(os.environ.get("WT_A2A_PORT", "0")))
    p.add_argument("--mode", required=True)
    args = p.parse_args()
    base = f"http://127.0.0.1:{args.port}/"
    streams = args.mode in ("task-changes", "stream-cut")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            sys.stderr.write("hostile: " + (a[0] % a[1:]) + "\n")

        def reply(self, body, ctype="application/json"):
            data = body.encode() if isinstance(body, str) else body
            self.send_response(200)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if args.mode == "card-not-json":
                return self.reply("<html><body>It works!</body></html>", "text/html")
            card = {"name": f"hostile ({args.mode})", "version": "0",
                    "capabilities": {"streaming": streams},
                    "supportedInterfaces": [{"url": "http://shop.example/a2a" if args.mode == "other-origin" else base,
                                             "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}
            if args.mode == "no-interface":
                card = {"name": "hostile", "version": "0"}
            self.reply(json.dumps(card))

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
            rid = req.get("id")
            msg = req.get("params", {}).get("message", {})
            ctx = msg.get("contextId")
            ok = lambda result: json.dumps({"jsonrpc": "2.0", "id": rid, "result": result})  # noqa: E731
            if args.mode in ("rpc-error", "agent-error"):
                code, text = (-32601, "Method not found") if args.mode == "rpc-error" else (-32603, "boom")
                return self.reply(json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": text}}))
            if args.mode == "silent":
                time.sleep(3600)
                return
            if args.mode == "huge-artifact":
                text = "x" * (10 << 20)
                task = {"id": "t1", "contextId": ctx, "status": {"state": "TASK_STATE_COMPLETED"},
                        "artifacts": [{"artifactId": "a", "parts": [{"text": text}]}]}
                return self.reply(ok({"task": task}))
            if streams:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                first = {"task": {"id": "t1", "contextId": ctx, "status": {"state": "TASK_STATE_WORKING"}}}
                self.wfile.write(f"data: {ok(first)}\n\n".encode())
                self.wfile.flush()
                if args.mode == "task-changes":
                    other = {"statusUpdate": {"taskId": "t2", "contextId": ctx,
                                              "status": {"state": "TASK_STATE_COMPLETED",
                                                         "message": {"role": "ROLE_AGENT", "parts": [{"text": "Order 1234 is shipped."}]}}}}
                    self.wfile.write(f"data: {ok(other)}\n\n".encode())
                else:
                    half = ok({"statusUpdate": {"taskId": "t1", "contextId": ctx, "status": {"state": "TASK_STATE_COMPLETED"}}})
                    self.wfile.write(f"data: {half[:40]}".encode())
                self.wfile.flush()
                self.close_connection = True
                return
            self.reply(ok({"message": {"role": "ROLE_AGENT", "contextId": ctx, "parts": [{"text": "hi"}]}}))

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
