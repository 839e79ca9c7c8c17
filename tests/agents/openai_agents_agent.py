"""An agent built on the OpenAI Agents SDK (`openai-agents`, pip), unmodified, for the model
gateway tests: `wt` starts it with the `process` runtime in session mode (JSON lines on
stdin/stdout). Its model is whatever `OPENAI_BASE_URL` and `OPENAI_API_KEY` name — `wt`'s
model gateway, with `gateway.openai_env = true` — and its tools are the run's MCP server
(`WT_MCP_URL`).

--stream   runs the agent streamed (`Runner.run_streamed`), so every model call is a
           streamed chat completion.

The one addition for the tests: each model call carries `X-Fakellm-Conversation-Id` set to
the run's id, so that fakellm (the upstream mock) keeps one conversation per run.
"""

import asyncio
import json
import os
import sys

from agents import (
    Agent,
    ModelSettings,
    Runner,
    set_default_openai_api,
    set_tracing_disabled,
)
from agents.mcp import MCPServerStreamableHttp


async def main():
    stream = "--stream" in sys.argv[1:]
    # The gateway serves chat completions; the SDK's default is the Responses API.
    set_default_openai_api("chat_completions")
    set_tracing_disabled(True)
    async with MCPServerStreamableHttp(
        params={"url": os.environ["WT_MCP_URL"]}, cache_tools_list=True
    ) as server:
        agent = Agent(
            name="support",
            instructions="You help customers with their orders. Look orders up before answering.",
            model="gpt-4o-mini",
            mcp_servers=[server],
            model_settings=ModelSettings(
                extra_headers={"X-Fakellm-Conversation-Id": os.environ["WT_RUN_ID"]}
            ),
        )
        history = []
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            msg = json.loads(line)
            if msg.get("type") != "turn":
                continue
            given = history + [{"role": "user", "content": msg["text"]}]
            if stream:
                result = Runner.run_streamed(agent, given)
                async for _ in result.stream_events():
                    pass
            else:
                result = await Runner.run(agent, given)
            history = result.to_input_list()
            reply = {"type": "reply", "turn": msg["turn"], "text": str(result.final_output)}
            print(json.dumps(reply), flush=True)


asyncio.run(main())
