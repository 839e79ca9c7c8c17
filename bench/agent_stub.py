"""A local agent for benchmarks: answers after a fixed delay (default 50 ms), as
- an `http`-runtime service (GET /health, POST /reset, POST /inject, GET /state), and
- an OpenAI-compatible chat-completions endpoint (POST /v1/chat/completions),
- an A2A 1.0 agent (its card at GET /.well-known/agent-card.json, JSON-RPC `SendMessage` at
  POST /a2a, answered with a message in the request's context),
and counts the answers it gave (GET /count), so a benchmark can check that a client really
made its calls. Replies never mention a refund, so a scenario that requires one fails (and
`debrief` talks). Any other path is a 404.

Usage: python3 bench/agent_stub.py PORT [DELAY_S]   (prints "ready" when listening)
"""
import itertools
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DELAY = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
ANSWERS = 0
LOCK = threading.Lock()
IDS = itertools.count()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle's algorithm and the
    # client's delayed ACK add 40 ms to every answer.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self.reply(200, {"ok": True})
        if self.path == "/count":
            return self.reply(200, {"answers": ANSWERS})
        if self.path == "/.well-known/agent-card.json":
            host = self.headers.get("Host", "127.0.0.1")
            return self.reply(200, {
                "name": "bench stub", "version": "1", "capabilities": {"streaming": False},
                "supportedInterfaces": [{"url": f"http://{host}/a2a", "protocolBinding": "JSONRPC",
                                         "protocolVersion": "1.0"}],
            })
        self.reply(200, {"sessions": []})

    def do_POST(self):
        global ANSWERS
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/reset":
            return self.reply(200, {})
        if self.path not in ("/inject", "/v1/chat/completions", "/a2a"):
            return self.reply(404, {"error": {"message": f"no such endpoint: {self.path}"}})
        time.sleep(DELAY)
        with LOCK:
            ANSWERS += 1
        text = "Order 1234 has shipped."
        if self.path == "/inject":
            return self.reply(200, {"reply": text, "session_id": body.get("session_id")})
        if self.path == "/a2a":
            context = body.get("params", {}).get("message", {}).get("contextId")
            return self.reply(200, {"jsonrpc": "2.0", "id": body.get("id"), "result": {"message": {
                "messageId": f"m-{next(IDS)}", "role": "ROLE_AGENT", "contextId": context,
                "parts": [{"text": text}]}}})
        # A complete chat.completion object: strict clients (the openai package) need it all.
        self.reply(200, {
            "id": f"chatcmpl-{next(IDS)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "m"),
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }],
            "usage": {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16},
        })


class Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A client that hangs up early (a cut turn, an HTTP client closing its pool) is normal.
        pass


if __name__ == "__main__":
    server = Server(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    server.request_queue_size = 256
    print("ready", flush=True)
    server.serve_forever()
