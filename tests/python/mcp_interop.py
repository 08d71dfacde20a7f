"""The official Python MCP SDK (`mcp` 2.3.0) as a client of the controller's /mcp.

Usage: mcp_interop.py URL TOKEN MODE, MODE being "legacy" (the 2025-11-25 initialize handshake
and its session) or "2026-07-28" (stateless, per-request _meta). Lists the tools, creates a
worker with a progress callback, lists it, is refused a second create of the task, stops it,
reads the workers as resources, and is refused with a wrong token. Prints MCP PYTHON OK.
"""

import asyncio
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def client(url, token, mode):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(url, http_client=http), mode=mode, raise_exceptions=True)


async def main(url, token, mode):
    async with client(url, token, mode) as c:
        tools = await c.list_tools()
        names = [t.name for t in tools.tools]
        assert {"create", "list", "stop", "logs", "templates"} <= set(names), names
        create = next(t for t in tools.tools if t.name == "create")
        assert create.output_schema and "secret" in create.description, create

        steps = []

        async def progress(progress, total, message):
            steps.append((progress, message))

        task = f"py-{mode}"
        created = await c.call_tool("create", {"task": task}, progress_callback=progress)
        assert not created.is_error, created
        worker = created.structured_content["worker"]
        assert len(created.structured_content["token"]) == 64
        assert steps, "no progress notification"
        assert [s[0] for s in steps] == sorted(s[0] for s in steps), steps

        listed = await c.call_tool("list", {"task": task})
        assert [w["worker_id"] for w in listed.structured_content["workers"]] == [worker["worker_id"]], listed

        again = await c.call_tool("create", {"task": task})
        assert again.is_error, again
        assert again.content[0].text.startswith("worker_exists: "), again.content
        assert again.structured_content["error"]["code"] == "worker_exists", again

        resources = await c.list_resources()
        uris = [str(r.uri) for r in resources.resources]
        assert f"a2a-worker://workers/{worker['worker_id']}" in uris, uris
        record = await c.read_resource(f"a2a-worker://workers/{worker['worker_id']}")
        assert worker["worker_id"] in record.contents[0].text

        stopped = await c.call_tool("stop", {"worker_id": worker["worker_id"]})
        assert not stopped.is_error, stopped
        # Stopped again: gone (not_found), or, where the engine takes a moment to remove it
        # (a pod terminating), still on its way out.
        gone = await c.call_tool("stop", {"worker_id": worker["worker_id"]})
        if gone.is_error:
            assert gone.structured_content["error"]["code"] == "not_found", gone
        else:
            assert gone.structured_content["worker"]["state"] in ("stopping", "exited"), gone

    refused = None
    try:
        async with client(url, "not-the-token-0123456789", mode) as c:
            await c.list_tools()
    except BaseException as e:  # an ExceptionGroup from the task group, or the error itself
        refused = e
    assert refused is not None, "a wrong token was accepted"
    assert any(s in repr(refused) for s in ("401", "nauthori", "bearer token is not valid")), repr(refused)
    print(f"MCP PYTHON OK ({mode}: {len(names)} tools, {len(steps)} progress steps)")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
