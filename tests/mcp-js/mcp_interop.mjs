// The official TypeScript MCP SDKs as clients of the controller's /mcp.
//
// Usage: node mcp_interop.mjs URL TOKEN MODE. MODE "2026-07-28": @modelcontextprotocol/client
// 2.x pinned to the stateless revision; "legacy": @modelcontextprotocol/sdk 1.x, the 2025-11-25
// initialize handshake and its session. Lists the tools, creates a worker with a progress
// callback, lists it, is refused a second create of the task, stops it, and is refused with a
// wrong token. Prints MCP TYPESCRIPT OK.
import assert from 'node:assert/strict';

const [url, token, mode] = process.argv.slice(2);

async function connect(bearer) {
  const requestInit = { headers: { Authorization: `Bearer ${bearer}` } };
  if (mode === 'legacy') {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    const client = new Client({ name: 'mcp-interop', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit }));
    return client;
  }
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const client = new Client(
    { name: 'mcp-interop', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: mode } } },
  );
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit }));
  return client;
}

// v1's callTool takes (params, resultSchema, options); v2's takes (params, options).
function callTool(client, name, args, options) {
  return mode === 'legacy'
    ? client.callTool({ name, arguments: args }, undefined, options)
    : client.callTool({ name, arguments: args }, options);
}

const client = await connect(token);
const tools = await client.listTools();
const names = tools.tools.map((t) => t.name);
for (const op of ['create', 'list', 'stop', 'logs', 'templates']) assert.ok(names.includes(op), `${op} in ${names}`);
const create = tools.tools.find((t) => t.name === 'create');
assert.ok(create.outputSchema && create.description.includes('secret'));

const steps = [];
const task = `ts-${mode}`;
const created = await callTool(client, 'create', { task }, { onprogress: (p) => steps.push(p.progress) });
assert.equal(created.isError, false, JSON.stringify(created));
const worker = created.structuredContent.worker;
assert.equal(created.structuredContent.token.length, 64);
assert.ok(steps.length > 0, 'no progress notification');

const listed = await callTool(client, 'list', { task });
assert.deepEqual(listed.structuredContent.workers.map((w) => w.worker_id), [worker.worker_id]);

const again = await callTool(client, 'create', { task });
assert.equal(again.isError, true);
assert.ok(again.content[0].text.startsWith('worker_exists: '), again.content[0].text);

const stopped = await callTool(client, 'stop', { worker_id: worker.worker_id });
assert.equal(stopped.isError, false, JSON.stringify(stopped));
await client.close();

let refused;
try {
  const wrong = await connect('not-the-token-0123456789');
  await wrong.listTools();
} catch (e) {
  refused = e;
}
assert.ok(refused, 'a wrong token was accepted');
assert.match(String(refused?.message ?? refused), /401|nauthori|bearer token is not valid/);
console.log(`MCP TYPESCRIPT OK (${mode}: ${names.length} tools, ${steps.length} progress steps)`);
