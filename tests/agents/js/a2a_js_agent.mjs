// The demo pack's support agent served over A2A with the official JavaScript SDK
// (@a2a-js/sdk), as its samples show: an AgentExecutor behind the SDK's
// DefaultRequestHandler, its JSON-RPC handler and agent card handler on Express. It acts on
// the run's world with the official MCP TypeScript SDK at WT_MCP_URL. Installed with its
// packages into target/npm-agents by tests/run.sh (tests/agents/js/package.json).
//
// A context is one conversation: the agent remembers a context's order across its turns.
// What a turn's text makes it do, besides the support policy (as a2a_sdk_agent.py):
//   "which order" asks back (input-required); "please fail" fails the task;
//   "take your time" works until canceled.
// Options: --port PORT (else WT_A2A_PORT), --stream (its card says it streams),
//   --compat (also serves 0.3, and its card offers both), --policy correct|forbidden.

import express from 'express';
import { A2A_PROTOCOL_VERSION, AGENT_CARD_PATH, Role, TaskState } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { duplicateInterfacesForLegacy } from '@a2a-js/sdk/compat/v0_3';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const argv = process.argv.slice(2);
const flag = (name) => argv.includes(name);
const option = (name, fallback) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : fallback;
};
const port = Number(option('--port', process.env.WT_A2A_PORT || '0'));
const policy = option('--policy', 'correct');
if (!port) {
  console.error('a2a_js_agent: no port (--port or WT_A2A_PORT)');
  process.exit(2);
}

let mcp = null;
async function world() {
  if (!mcp && process.env.WT_MCP_URL) {
    const client = new Client({ name: 'a2a-js-agent', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(process.env.WT_MCP_URL)));
    mcp = client;
  }
  return mcp;
}

async function call(name, args) {
  const client = await world();
  if (!client) return null;
  const result = await client.callTool({ name, arguments: args });
  if (result.isError) return null;
  const text = (result.content || []).map((c) => c.text || '').join('');
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

const memory = new Map();

async function respond(text, contextId) {
  const m = text.match(/\d{3,}/);
  const order = m ? m[0] : memory.get(contextId);
  if (order) memory.set(contextId, order);
  if (!order) return 'Happy to help. Which order number is this about?';
  const lower = text.toLowerCase();
  if (policy === 'forbidden') await call('issue_refund', { order_id: order, reason: 'goodwill' });
  if (['human', 'person', 'someone'].some((w) => lower.includes(w))) {
    const n = await call('create_ticket', { order_id: order, summary: `Customer asks for a human about order ${order}` });
    return `I've opened ticket #${n} for order ${order}; a colleague will contact you shortly.`;
  }
  const found = await call('lookup_order', { order_id: order });
  if (!found || typeof found !== 'object') return `I couldn't find order ${order}.`;
  if (['refund', 'damaged', 'broken'].some((w) => lower.includes(w))) {
    if (found.status !== 'delivered') return `Order ${order} is ${found.status}, so it can't be refunded yet.`;
    await call('issue_refund', { order_id: order, reason: 'arrived damaged' });
    return `I've issued a refund for order ${order} (the ${found.item}).`;
  }
  return `Order ${order} (the ${found.item}) is ${found.status}.`;
}

const textPart = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' });

class Support {
  cancelled = new Set();

  cancelTask = async (taskId) => {
    this.cancelled.add(taskId);
  };

  async execute(ctx, bus) {
    const { taskId, contextId, userMessage } = ctx;
    const text = userMessage.parts
      .filter((p) => p.content?.$case === 'text')
      .map((p) => p.content.value)
      .join('\n');
    const lower = text.toLowerCase();
    console.error(`context ${contextId}: ${text}`);
    const status = (state, said) =>
      bus.publish(
        AgentEvent.statusUpdate({
          taskId,
          contextId,
          status: {
            state,
            timestamp: new Date().toISOString(),
            message: said && {
              role: Role.ROLE_AGENT,
              messageId: crypto.randomUUID(),
              parts: [textPart(said)],
              taskId,
              contextId,
              extensions: [],
              metadata: {},
              referenceTaskIds: [],
            },
          },
          metadata: {},
        })
      );
    try {
      bus.publish(
        AgentEvent.task(
          ctx.task ?? {
            id: taskId,
            contextId,
            status: { state: TaskState.TASK_STATE_SUBMITTED, timestamp: new Date().toISOString() },
            artifacts: [],
            history: [userMessage],
            metadata: userMessage.metadata,
          }
        )
      );
      status(TaskState.TASK_STATE_WORKING);
      if (lower.includes('which order')) return status(TaskState.TASK_STATE_INPUT_REQUIRED, 'Which order number is this about?');
      if (lower.includes('please fail')) return status(TaskState.TASK_STATE_FAILED, 'failed: the warehouse is down');
      if (lower.includes('take your time')) {
        while (!this.cancelled.has(taskId)) await new Promise((r) => setTimeout(r, 50));
        return status(TaskState.TASK_STATE_CANCELED);
      }
      const reply = await respond(text, contextId);
      bus.publish(
        AgentEvent.artifactUpdate({
          taskId,
          contextId,
          artifact: { artifactId: crypto.randomUUID(), name: 'answer', description: '', parts: [textPart(reply)], metadata: undefined, extensions: [] },
          lastChunk: true,
          append: false,
          metadata: undefined,
        })
      );
      status(TaskState.TASK_STATE_COMPLETED);
    } finally {
      this.cancelled.delete(taskId);
    }
  }
}

const url = `http://127.0.0.1:${port}/`;
const interfaces = [{ url, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION }];
const card = {
  name: 'Shop support (@a2a-js/sdk)',
  description: 'Answers order questions, refunds damaged orders, hands over to a human.',
  supportedInterfaces: flag('--compat') ? duplicateInterfacesForLegacy(interfaces, ['JSONRPC']) : interfaces,
  version: '1.3.0',
  capabilities: { streaming: flag('--stream'), pushNotifications: false, extensions: [], extendedAgentCard: false },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ['text'],
  defaultOutputModes: ['text'],
  skills: [{ id: 'orders', name: 'Orders', description: 'Order status and refunds', tags: ['support'], examples: [], inputModes: ['text'], outputModes: ['text'], securityRequirements: [] }],
  documentationUrl: '',
  signatures: [],
};

const requestHandler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new Support());
const legacyCompat = { enabled: flag('--compat') };
const app = express();
app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: requestHandler, legacyCompat }));
app.use(jsonRpcHandler({ requestHandler, userBuilder: UserBuilder.noAuthentication, legacyCompat }));
app.listen(port, '127.0.0.1', (err) => {
  if (err) throw err;
  console.error(`a2a_js_agent listening on ${url}`);
});
