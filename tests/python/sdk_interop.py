"""Interoperability with the official A2A Python SDK (a2a-sdk 1.3.0).

Usage: sdk_interop.py BASE_URL TOKEN [JSONRPC|HTTP+JSON]

Reads the controller's Agent Card with the SDK's card resolver, has the SDK's client factory
choose the card's interface for the binding given (default JSONRPC), sends a `list` control
request with SendMessage (bearer header on every call), then a `create`, reads that task back
with GetTask and lists tasks, streams and subscribes, checking the reply shapes as the SDK
parses them; over HTTP+JSON also the extended Agent Card.
Exits non-zero with a message on any mismatch.
"""

import asyncio
import sys

import httpx
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_message
from a2a.types import (CancelTaskRequest, GetExtendedAgentCardRequest, GetTaskRequest, ListTasksRequest, Part,
                       Role, SendMessageRequest, SubscribeToTaskRequest)

WORKING, COMPLETED, CANCELED = 2, 3, 5  # TASK_STATE_WORKING, _COMPLETED, _CANCELED


def check(cond, what):
    if not cond:
        raise SystemExit(f"interop check failed: {what}")


def request(data, return_immediately=False):
    value = struct_pb2.Value()
    value.struct_value.update(data)
    msg = new_message([Part(data=value)], role=Role.ROLE_USER)
    req = SendMessageRequest(message=msg)
    req.configuration.return_immediately = return_immediately
    return req


async def send(client, data):
    events = [e async for e in client.send_message(request(data))]
    check(len(events) == 1, f"one response, got {len(events)}")
    check(events[0].HasField("task"), "the result is a task")
    return events[0].task


async def main(base, token, binding):
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        interfaces = [(i.protocol_binding, i.url, i.protocol_version) for i in card.supported_interfaces]
        check(interfaces == [("JSONRPC", f"{base}/a2a", "1.0"), ("HTTP+JSON", f"{base}/a2a/rest", "1.0")],
              f"card interfaces: {interfaces}")
        check([s.id for s in card.skills] == ["create", "list", "stop", "renew", "suspend", "watch", "templates", "workspaces", "logs"], "skills")
        check("bearer" in card.security_schemes, "bearer scheme")
        check(card.capabilities.streaming, "streaming")

        def config(streaming):
            return ClientConfig(httpx_client=http, streaming=streaming,
                                supported_protocol_bindings=[binding])

        factory = ClientFactory(config(False))
        client = await factory.create_from_url(base)

        task = await send(client, {"operation": "list"})
        check(task.status.state == 3, f"COMPLETED, got {task.status.state}")  # TASK_STATE_COMPLETED
        data = MessageToDict(task.artifacts[0].parts[0].data)
        check(data == {"workers": []}, f"list reply data: {data}")
        check(task.id and task.context_id, "ids")

        task = await send(client, {"operation": "create", "task": "sdk-interop",
                                   "metadata": {"team": "sdk", "run": binding}})
        data = MessageToDict(task.artifacts[0].parts[0].data)
        check(len(data.get("token", "")) == 64, "create returns a 64-hex token")
        worker = data["worker"]
        check(sorted(worker) == sorted(["worker_id", "task", "a2a_url", "backend", "state",
                                        "pane_id", "session_id", "created_at", "reason",
                                        "expires_at", "metadata", "scope", "template"]),
              f"worker fields: {sorted(worker)}")
        check(worker["metadata"] == {"team": "sdk", "run": binding}, f"metadata: {worker}")
        tagged = await send(client, {"operation": "list", "metadata": {"team": "sdk"}})
        listed_workers = MessageToDict(tagged.artifacts[0].parts[0].data)["workers"]
        check([w["task"] for w in listed_workers] == ["sdk-interop"], f"list by metadata: {listed_workers}")

        again = await client.get_task(GetTaskRequest(id=task.id))
        data = MessageToDict(again.artifacts[0].parts[0].data)
        check("token" not in data, "GetTask does not return the token again")

        listed = await client.list_tasks(ListTasksRequest(page_size=10))
        check(len(listed.tasks) == 3, f"three tasks listed, got {len(listed.tasks)}")

        bad = await send(client, {"operation": "explode"})
        check(bad.status.state == 7, f"REJECTED, got {bad.status.state}")  # TASK_STATE_REJECTED
        err = MessageToDict(bad.status.message.parts[1].data)["error"]
        check(err["code"] == "invalid_request", f"error code: {err}")

        # Streaming: the task, each step as a WORKING status, the artifact, the final status.
        streaming = await ClientFactory(config(True)).create_from_url(base)
        events = [e async for e in streaming.send_message(request({"operation": "create", "task": "streamed"}))]
        kinds = [e.WhichOneof("payload") for e in events]
        check(kinds == ["task", "status_update", "status_update", "artifact_update", "status_update"],
              f"create stream: {kinds}")
        check(events[0].task.status.state == WORKING, "the stream starts WORKING")
        steps = [e.status_update.status.message.parts[0].text for e in events[1:3]]
        check(steps == ["fake: starting", "fake: ready"], f"progress in order: {steps}")
        check(all(e.status_update.status.state == WORKING for e in events[1:3]), "steps are WORKING")
        data = MessageToDict(events[3].artifact_update.artifact.parts[0].data)
        check(len(data.get("token", "")) == 64, "the streamed create delivers the token")
        check(events[4].status_update.status.state == COMPLETED, "ends COMPLETED")
        check(events[4].status_update.task_id == events[0].task.id, "one task throughout")

        events = [e async for e in streaming.send_message(request({"operation": "list"}))]
        kinds = [e.WhichOneof("payload") for e in events]
        check(kinds == ["task", "artifact_update", "status_update"], f"list stream: {kinds}")
        check(events[-1].status_update.status.state == COMPLETED, "list ends COMPLETED")
        listed = MessageToDict(events[1].artifact_update.artifact.parts[0].data)["workers"]
        streamed_id = [w["worker_id"] for w in listed if w["task"] == "streamed"][0]
        events = [e async for e in streaming.send_message(
            request({"operation": "stop", "worker_id": streamed_id}))]
        kinds = [e.WhichOneof("payload") for e in events]
        check(kinds == ["task", "artifact_update", "status_update"], f"stop stream: {kinds}")
        check(events[-1].status_update.status.state == COMPLETED, "stop ends COMPLETED")

        # A returnImmediately create, then a subscriber sees the rest of it live.
        [started] = [e async for e in client.send_message(
            request({"operation": "create", "task": "later"}, return_immediately=True))]
        check(started.task.status.state == WORKING, f"returned WORKING: {started.task.status.state}")
        events = [e async for e in streaming.subscribe(SubscribeToTaskRequest(id=started.task.id))]
        kinds = [e.WhichOneof("payload") for e in events]
        check(kinds[0] == "task" and kinds[-1] == "status_update", f"subscription: {kinds}")
        check("artifact_update" in kinds, f"the subscriber sees the result: {kinds}")
        check(events[-1].status_update.status.state == COMPLETED, "it finished")

        # A watch: its snapshot (the one worker tagged team=sdk), synced, a create heard as it
        # happens; CancelTask ends it, CANCELED.
        watch = streaming.send_message(request({"operation": "watch", "metadata": {"team": "sdk"}}))
        first = await watch.__anext__()
        check(first.WhichOneof("payload") == "task", f"a watch starts with its task: {first}")
        watch_id = first.task.id

        async def next_event():
            while True:
                e = await watch.__anext__()
                if e.WhichOneof("payload") != "status_update":
                    continue
                status = e.status_update.status
                if status.state != WORKING:
                    return {"type": "end", "state": status.state}
                return MessageToDict(status.message.parts[1].data)["event"]

        seen = [await next_event(), await next_event()]
        check([e["type"] for e in seen] == ["added", "synced"], f"watch snapshot: {seen}")
        check(seen[0]["worker"]["metadata"]["team"] == "sdk", f"watch worker: {seen[0]}")
        await send(client, {"operation": "create", "task": "watched", "metadata": {"team": "sdk"}})
        added = await next_event()
        check(added["type"] == "added" and added["worker"]["task"] == "watched", f"watch added: {added}")
        await client.cancel_task(CancelTaskRequest(id=watch_id))
        end = await next_event()
        while end["type"] != "end":
            end = await next_event()
        check(end["state"] == CANCELED, f"the watch ends CANCELED: {end}")

        if card.capabilities.extended_agent_card:
            extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
            check(extended.name == card.name, "the extended card is this agent's")
            [ext] = extended.capabilities.extensions
            params = MessageToDict(ext.params)
            check(params["backend"] == "docker", f"extended card params: {params}")
    print(f"a2a-sdk interop over {binding}: ok")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1].rstrip("/"), sys.argv[2],
                     sys.argv[3] if len(sys.argv) > 3 else "JSONRPC"))
