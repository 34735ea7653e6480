"""The official Python `mcp` client (streamable HTTP, a session per `initialize`) against
agent-loop-serve's MCP server with a bearer token: it lists the tools, calls the agent, and
closes the session (a DELETE) on leaving, logging "Session termination failed: N" for any
answer but 200, 204 or 405.

Usage: mcp_session.py MCP_URL TOKEN. Prints one JSON object: the tools, the call's text, the
session id, and the warnings the client logged.
"""
import asyncio
import json
import logging
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL, TOKEN = sys.argv[1], sys.argv[2]


class Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


async def main():
    kept = Kept()
    logging.getLogger("mcp").addHandler(kept)
    out = {}
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    async with client:
        async with streamable_http_client(URL, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                out["tools"] = [t.name for t in tools.tools]
                result = await session.call_tool("ask_agent", {"task": "What is 2 + 3?"})
                out["text"] = "".join(c.text for c in result.content if c.type == "text")
                out["is_error"] = bool(result.is_error)
    out["warnings"] = kept.messages
    print(json.dumps(out))


asyncio.run(main())
