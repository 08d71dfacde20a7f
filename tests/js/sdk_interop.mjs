// Interoperability with the official A2A JavaScript SDK (@a2a-js/sdk 1.3.0).
// Usage: node sdk_interop.mjs BASE_URL TOKEN [JSONRPC|HTTP+JSON]
// Reads the Agent Card through the SDK's ClientFactory, preferring the transport of the binding
// given (default JSONRPC; bearer header on every call), so the factory picks that interface
// from the card; sends `list` and `create`, reads the create task back with getTask, lists
// tasks, checks a rejected request, streams and resubscribes, and reads the extended card, as
// the SDK parses them. Exits non-zero on any mismatch.
import {
  ClientFactory,
  ClientFactoryOptions,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from '@a2a-js/sdk/client';

const [base, token, binding = 'JSONRPC'] = process.argv.slice(2);
const check = (cond, what) => {
  if (!cond) {
    console.error(`interop check failed: ${what}`);
    process.exit(1);
  }
};
const authFetch = (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('Authorization', `Bearer ${token}`);
  if (process.env.A2A_JS_DEBUG) console.error('REQUEST', init.body);
  return fetch(url, { ...init, headers });
};
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [
      new JsonRpcTransportFactory({ fetchImpl: authFetch }),
      new RestTransportFactory({ fetchImpl: authFetch }),
    ],
    preferredTransports: [binding],
  }),
);
const client = await factory.createFromUrl(base);

const send = async (data) => {
  const result = await client.sendMessage({
    message: {
      messageId: `m-${Math.random()}`,
      role: 1, // ROLE_USER
      parts: [{ content: { $case: 'data', value: data } }],
    },
  });
  const task = result?.payload?.$case === 'task' ? result.payload.value : result?.task ?? result;
  check(task && task.id && task.status, `a task came back: ${JSON.stringify(result)}`);
  return task;
};
const dataOf = (task) => task.artifacts[0].parts[0].content.value;
const stateName = (s) => (typeof s === 'number' ? s : String(s));

let task = await send({ operation: 'list' });
check(stateName(task.status.state) === 3 || String(task.status.state).endsWith('COMPLETED'), `list completed: ${task.status.state}`);
check(JSON.stringify(dataOf(task)) === JSON.stringify({ workers: [] }), `list data ${JSON.stringify(dataOf(task))}`);

task = await send({ operation: 'create', task: 'js-interop' });
const created = dataOf(task);
check(typeof created.token === 'string' && created.token.length === 64, 'create returns a 64-hex token');
check(created.worker && created.worker.task === 'js-interop', 'create returns the worker');

const again = await client.getTask({ id: task.id });
check(!('token' in dataOf(again)), 'getTask does not return the token again');

const listed = await client.listTasks({ pageSize: 10 });
check(listed.tasks.length === 2, `two tasks listed, got ${listed.tasks.length}`);

const bad = await send({ operation: 'explode' });
check(stateName(bad.status.state) === 7 || String(bad.status.state).endsWith('REJECTED'), `rejected: ${bad.status.state}`);
const error = bad.status.message.parts[1].content.value.error;
check(error.code === 'invalid_request', `error code ${JSON.stringify(error)}`);
// Streaming: the task, each step as a WORKING status, the artifact, the final status.
const WORKING = 2;
const COMPLETED = 3;
const isState = (s, n, name) => s === n || String(s).endsWith(name);
const collect = async (stream) => {
  const events = [];
  for await (const e of stream) events.push(e);
  return events;
};
const caseOf = (e) => e?.payload?.$case ?? Object.keys(e).find((k) => ['task', 'statusUpdate', 'artifactUpdate', 'message'].includes(k));
const valueOf = (e) => e?.payload?.value ?? e[caseOf(e)];
const streamed = await collect(client.sendMessageStream({
  message: { messageId: 'm-stream', role: 1, parts: [{ content: { $case: 'data', value: { operation: 'create', task: 'js-streamed' } } }] },
}));
const kinds = streamed.map(caseOf);
check(JSON.stringify(kinds) === JSON.stringify(['task', 'statusUpdate', 'statusUpdate', 'artifactUpdate', 'statusUpdate']), `create stream ${JSON.stringify(kinds)}`);
check(isState(valueOf(streamed[0]).status.state, WORKING, 'WORKING'), 'the stream starts WORKING');
const steps = streamed.slice(1, 3).map((e) => valueOf(e).status.message.parts[0].content.value);
check(JSON.stringify(steps) === JSON.stringify(['fake: starting', 'fake: ready']), `progress ${JSON.stringify(steps)}`);
const streamedData = valueOf(streamed[3]).artifact.parts[0].content.value;
check(typeof streamedData.token === 'string' && streamedData.token.length === 64, 'the streamed create delivers the token');
check(isState(valueOf(streamed[4]).status.state, COMPLETED, 'COMPLETED'), 'ends COMPLETED');

const streamedWorker = streamedData.worker.worker_id;
const stopped = await collect(client.sendMessageStream({
  message: { messageId: 'm-stop', role: 1, parts: [{ content: { $case: 'data', value: { operation: 'stop', worker_id: streamedWorker } } }] },
}));
const stopKinds = stopped.map(caseOf);
check(JSON.stringify(stopKinds) === JSON.stringify(['task', 'artifactUpdate', 'statusUpdate']), `stop stream ${JSON.stringify(stopKinds)}`);
check(isState(valueOf(stopped[2]).status.state, COMPLETED, 'COMPLETED'), 'stop ends COMPLETED');

// A returnImmediately create, then resubscribeTask sees the rest of it live.
const started = await client.sendMessage({
  message: { messageId: 'm-later', role: 1, parts: [{ content: { $case: 'data', value: { operation: 'create', task: 'js-later' } } }] },
  configuration: { returnImmediately: true },
});
const startedTask = started?.payload?.$case === 'task' ? started.payload.value : started?.task ?? started;
check(isState(startedTask.status.state, WORKING, 'WORKING'), `returned WORKING: ${startedTask.status.state}`);
const sub = await collect(client.resubscribeTask({ id: startedTask.id }));
const subKinds = sub.map(caseOf);
check(subKinds[0] === 'task' && subKinds.includes('artifactUpdate'), `subscription ${JSON.stringify(subKinds)}`);
check(isState(valueOf(sub[sub.length - 1]).status.state, COMPLETED, 'COMPLETED'), 'it finished');
const extended = await client.getAgentCard();
check(extended.capabilities.extensions.length === 1, `the extended card: ${JSON.stringify(extended.capabilities)}`);
console.log(`a2a-js interop over ${binding}: ok`);
