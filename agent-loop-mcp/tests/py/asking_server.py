"""An MCP server written with the official Python SDK (`mcp`, pinned in
scripts/mcp-requirements.txt) whose tools ask the client things mid-call: elicitation (form and
URL mode) and sampling. agent-loop-mcp's tests (tests/asking.rs) start it and drive it with our
client.

    python asking_server.py http    serves streamable HTTP on a free 127.0.0.1 port and prints
                                    `PORT <n>` on stdout once it listens
    python asking_server.py stdio   speaks MCP over stdin/stdout

Each tool answers with what the client sent back, so a test reads in the tool's result what the
server received.
"""

import json
import socket
import sys
import warnings

import anyio
import uvicorn
from pydantic import BaseModel, Field

import mcp.types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning

# Sampling is deprecated from protocol 2026-07-28 on; this server speaks 2025-11-25 with us.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

server = MCPServer("asking", log_level="WARNING")


class Table(BaseModel):
    seats: int = Field(description="How many seats", ge=1, le=12)
    window: bool = Field(default=False, description="A table by the window")


class Confirm(BaseModel):
    note: str = Field(default="", description="Anything to add")


def answer(result) -> str:
    """What the client answered, as JSON: the action and, when accepted, the content."""
    data = getattr(result, "data", None)
    return json.dumps(
        {"action": result.action, "content": data.model_dump() if data is not None else None},
        sort_keys=True,
    )


@server.tool()
async def book_table(date: str, ctx: Context) -> str:
    """Books a table; asks the user how many seats."""
    result = await ctx.elicit(f"How many seats on {date}?", schema=Table)
    return "booking " + answer(result)


@server.tool()
async def confirm(action: str, ctx: Context) -> str:
    """Asks the user to confirm an action (nothing is required)."""
    result = await ctx.elicit(f"Go ahead and {action}?", schema=Confirm)
    return "confirm " + answer(result)


@server.tool()
async def book_twice(ctx: Context) -> str:
    """Asks two questions in a row, in one call."""
    first = await ctx.elicit("Seats for lunch?", schema=Table)
    second = await ctx.elicit("Seats for dinner?", schema=Table)
    return "lunch " + answer(first) + " dinner " + answer(second)


@server.tool()
async def link_account(ctx: Context) -> str:
    """Sends the user to a URL (URL-mode elicitation)."""
    result = await ctx.elicit_url(
        "Sign in to the calendar service.", "https://calendar.example/connect?s=1", "connect-1"
    )
    return "link " + json.dumps({"action": result.action})


@server.tool()
async def ask_unrelated(ctx: Context) -> str:
    """Asks a question that belongs to no request (the standalone stream, over HTTP)."""
    result = await ctx.request_context.session.elicit_form(
        "A question outside any call",
        {"type": "object", "properties": {"x": {"type": "string"}}},
    )
    return "unrelated " + json.dumps({"action": result.action})


@server.tool()
async def summarize(text: str, max_tokens: int, ctx: Context) -> str:
    """Asks the client's model to summarize `text` (sampling)."""
    result = await ctx.request_context.session.create_message(
        [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))],
        max_tokens=max_tokens,
        system_prompt="Summarize in one sentence.",
        model_preferences=types.ModelPreferences(hints=[types.ModelHint(name="claude")]),
        related_request_id=ctx.request_id,
    )
    content = result.content
    text_out = content.text if isinstance(content, types.TextContent) else repr(content)
    return "summary " + json.dumps(
        {"text": text_out, "model": result.model, "stop": result.stop_reason, "role": result.role},
        sort_keys=True,
    )


@server.tool()
async def client_capabilities(ctx: Context) -> str:
    """What the client declared in its initialize request."""
    caps = ctx.request_context.session.client_capabilities
    declared = caps.model_dump(by_alias=True, exclude_none=True) if caps is not None else {}
    return "capabilities " + json.dumps(declared, sort_keys=True)


async def serve_http() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    print(f"PORT {port}", flush=True)
    await uv.serve(sockets=[sock])


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "http"
    if mode == "stdio":
        server.run("stdio")
    else:
        anyio.run(serve_http)
