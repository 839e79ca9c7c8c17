"""The demo pack's support agent served over A2A with the official Python SDK (a2a-sdk), as
its docs show: an AgentExecutor behind the SDK's DefaultRequestHandler, its JSON-RPC routes
and its agent card on Starlette, run by uvicorn. The policy is support_agent.py's (it acts on
the run's world over MCP at WT_MCP_URL); what the A2A side does is this file's.

Each A2A context is one conversation: the agent remembers the order of a context across its
turns, and starts afresh in a new one.

What a turn's text makes it do, besides the support policy:
  "hello"          answers with a message (no task)
  "which order"    asks back: the task is input-required; the next turn answers it
  "please fail"    the task fails ("failed: the warehouse is down")
  "reject this"    the task is rejected
  "log me in"      the task needs auth (auth-required)
  "take your time" works past any deadline (the task stays working until canceled)
  "as data"        adds a data part and a file part (by URL) to its artifact
  "do: put item=x" runs the calls it spells out on its world (world_agent.py's script), the
                   way a remote agent acts on a world server it shares with wt

Options: --require-bearer VAR (401 without `Authorization: Bearer $VAR`), --port (else WT_A2A_PORT), --policy (support_agent.py's: correct, forbidden, …), --stream (the card says it streams), --compat (also
serves protocol 0.3 on the same endpoint, and its card offers both), --only-0.3 (its card
offers 0.3 alone), --latency MS (each turn waits that long first: a bench's agent),
--no-mcp (no world: the bench's agent).
"""

import argparse
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import support_agent  # noqa: E402

from a2a.helpers.proto_helpers import (  # noqa: E402
    new_data_part,
    new_task,
    new_text_message,
    new_text_part,
    new_url_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext  # noqa: E402
from a2a.server.events import EventQueue  # noqa: E402
from a2a.server.request_handlers import DefaultRequestHandler  # noqa: E402
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes  # noqa: E402
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater  # noqa: E402
from a2a.types import (  # noqa: E402
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    TaskState,
)


class Support(AgentExecutor):
    def __init__(self, args):
        self.args = args
        self.memories = {}
        self.client = None

    async def mcp(self):
        if self.client is None and os.environ.get("WT_MCP_URL") and not self.args.no_mcp:
            from mcp import Client

            self.client = await Client(os.environ["WT_MCP_URL"]).__aenter__()
        return self.client

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        lower = text.lower()
        sys.stderr.write(f"context {context.context_id}: {text}\n")
        if self.args.latency:
            await asyncio.sleep(self.args.latency / 1000)
        if "hello" in lower and context.current_task is None:
            await event_queue.enqueue_event(
                new_text_message("Hello! Which order can I help with?", context_id=context.context_id)
            )
            return
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(
                new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED,
                         history=[context.message])
            )
        await updater.start_work()
        say = lambda t: updater.new_agent_message([new_text_part(t)])  # noqa: E731
        if "which order" in lower:
            await updater.requires_input(say("Which order number is this about?"))
            return
        if "please fail" in lower:
            await updater.failed(say("failed: the warehouse is down"))
            return
        if "reject this" in lower:
            await updater.reject(say("I cannot help with that."))
            return
        if "log me in" in lower:
            await updater.requires_auth(say("Sign in at the shop first."))
            return
        if "take your time" in lower:
            await asyncio.sleep(3600)
            return
        memory = self.memories.setdefault(context.context_id, support_agent.Memory())
        client = await self.mcp()
        if client and lower.startswith("do:"):
            import world_agent

            await updater.add_artifact([new_text_part(await world_agent.script(client, text))], name="answer")
            await updater.complete()
            return
        reply = await support_agent.respond(self.args.policy, client, text, memory, None) if client else f"You said: {text}"
        parts = [new_text_part(reply)]
        if "as data" in lower:
            parts += [new_data_part({"order": memory.order, "ok": True}),
                      new_url_part("https://shop.example/receipt.pdf", media_type="application/pdf")]
        await updater.add_artifact(parts, name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def card(args, port):
    url = f"http://127.0.0.1:{port}/"
    versions = ["0.3"] if args.only_0_3 else (["1.0", "0.3"] if args.compat else ["1.0"])
    return AgentCard(
        name="Shop support (a2a-sdk)",
        description="Answers order questions, refunds damaged orders, hands over to a human.",
        version="1.3.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=v) for v in versions
        ],
        capabilities=AgentCapabilities(streaming=args.stream),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "application/json"],
        skills=[AgentSkill(id="orders", name="Orders", description="Order status and refunds", tags=["support"])],
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=int(os.environ.get("WT_A2A_PORT", "0")))
    p.add_argument("--stream", action="store_true")
    p.add_argument("--compat", action="store_true")
    p.add_argument("--only-0.3", dest="only_0_3", action="store_true")
    p.add_argument("--latency", type=float, default=0)
    p.add_argument("--no-mcp", action="store_true")
    p.add_argument("--policy", default="correct")
    p.add_argument("--require-bearer", metavar="VAR", help="refuse (401) any request without Authorization: Bearer $VAR")
    args = p.parse_args()
    if not args.port:
        sys.exit("a2a_sdk_agent: no port (--port or WT_A2A_PORT)")
    import uvicorn
    from starlette.applications import Starlette

    agent_card = card(args, args.port)
    handler = DefaultRequestHandler(
        agent_executor=Support(args), task_store=InMemoryTaskStore(), agent_card=agent_card
    )
    routes = create_agent_card_routes(agent_card) + create_jsonrpc_routes(
        handler, rpc_url="/", enable_v0_3_compat=args.compat or args.only_0_3
    )
    app = Starlette(routes=routes)
    if args.require_bearer:
        app = require_bearer(app, os.environ[args.require_bearer])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


def require_bearer(app, key):
    """An ASGI layer that answers 401 to a request without the key, as a deployed agent's
    gateway would."""
    want = f"Bearer {key}".encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != want:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    main()
