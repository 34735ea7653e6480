"""An A2A 1.0 server written with the official `a2a-sdk` (JSON-RPC binding, starlette + uvicorn),
for agent-loop-serve's A2A client (`agent_loop_serve::a2a::client::RemoteAgent`) to call.

Usage: a2a_server.py MODE, MODE one of:
  answer     streams a status message and the answer in two artifact chunks, then completes;
  ask        asks which city (input-required), then answers for the city it is told;
  slow       works until it is cancelled (its cancel() publishes the canceled state);
  auth       asks for authorization (auth-required), then answers once it is sent a token;
  reject     rejects every task, saying why;
  nostream   `answer`, with a card that says streaming is not supported.

Binds 127.0.0.1 on a free port and prints one JSON line, {"url": "http://127.0.0.1:PORT"},
then serves until it is killed (or its standard input closes); prints {"canceled": TASK_ID}
when it cancels a task.
"""
import asyncio
import json
import socket
import sys

import uvicorn
from starlette.applications import Starlette

from a2a.helpers.proto_helpers import get_message_text, new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    TaskState,
)

MODE = sys.argv[1]


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = get_message_text(context.message)
        task = context.current_task
        if task is None:
            task = new_task(
                context.task_id,
                context.context_id,
                TaskState.TASK_STATE_SUBMITTED,
                history=[context.message],
            )
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if MODE in ("answer", "nostream"):
            await updater.start_work(updater.new_agent_message([new_text_part(f"Looking up: {text}")]))
            await updater.add_artifact(
                [new_text_part("The answer ")], artifact_id="a1", name="answer",
                append=False, last_chunk=False,
            )
            await updater.add_artifact(
                [new_text_part("is 42.")], artifact_id="a1", name="answer",
                append=True, last_chunk=True,
            )
            await updater.complete()
        elif MODE == "ask":
            if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
                await updater.start_work()
                await updater.requires_input(
                    updater.new_agent_message([new_text_part("Which city?")])
                )
                return
            await updater.start_work()
            await updater.add_artifact(
                [new_text_part(f"Sunny in {text}.")], artifact_id="w", name="weather",
                last_chunk=True,
            )
            await updater.complete()
        elif MODE == "auth":
            if task.status.state != TaskState.TASK_STATE_AUTH_REQUIRED:
                await updater.requires_auth(
                    updater.new_agent_message([new_text_part("Sign in at https://example.com/login.")])
                )
                return
            await updater.add_artifact([new_text_part(f"Signed in with {text}.")], artifact_id="a")
            await updater.complete()
        elif MODE == "reject":
            await updater.reject(updater.new_agent_message([new_text_part("I only do weather.")]))
        elif MODE == "slow":
            await updater.start_work(updater.new_agent_message([new_text_part("Working…")]))
            await asyncio.Event().wait()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()
        # For the test: a notification that the task is cancelled (it waits on this line).
        print(json.dumps({"canceled": context.task_id}), flush=True)


def card(url: str) -> AgentCard:
    return AgentCard(
        name="Weather Oracle (python)",
        description="Answers questions about the weather.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url + "/a2a", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=MODE != "nostream"),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="forecast", name="Forecast", description="Tells tomorrow's weather.",
                tags=["weather"],
            ),
            AgentSkill(id="climate", name="Climate", description="Describes a city's climate.", tags=["weather"]),
        ],
    )


async def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the URL is printed: the test connects as soon as it reads it.
    sock.listen(128)
    url = "http://127.0.0.1:%d" % sock.getsockname()[1]
    agent_card = card(url)
    handler = DefaultRequestHandler(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=agent_card
    )
    app = Starlette(
        routes=create_agent_card_routes(agent_card) + create_jsonrpc_routes(handler, "/a2a")
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(json.dumps({"url": url}), flush=True)

    async def stdin_closed() -> None:
        # The test holds our standard input: when it ends (the test is over), so do we.
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)
        server.should_exit = True

    watcher = asyncio.ensure_future(stdin_closed())
    await server.serve(sockets=[sock])
    watcher.cancel()


asyncio.run(main())
