"""Drives agent-loop-serve's A2A 1.0 server with the official `a2a-sdk` client (JSON-RPC).

Usage: a2a_client.py BASE_URL MODE, MODE one of send, stream, input, cancel, fail, bad.
Prints one JSON object with what the client saw, for the Rust test to assert on.
"""
import asyncio
import json
import sys

from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import A2AError

URL, MODE = sys.argv[1], sys.argv[2]


def message(text, task_id=None, context_id=None, message_id="m1"):
    m = Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        m.task_id = task_id
    if context_id:
        m.context_id = context_id
    return SendMessageRequest(message=m)


def state(status):
    return TaskState.Name(status.state)


def status_text(status):
    return "".join(p.text for p in status.message.parts) if status.HasField("message") else None


def task_summary(task):
    return {
        "id": task.id,
        "context_id": task.context_id,
        "state": state(task.status),
        "status_text": status_text(task.status),
        "answer": "".join(p.text for a in task.artifacts for p in a.parts),
    }


async def error_of(awaitable):
    try:
        await awaitable
        return None
    except A2AError as e:
        return type(e).__name__


async def first_task(client, request):
    async for response in client.send_message(request):
        if response.HasField("task"):
            return response.task
    raise RuntimeError("no task in the response")


async def main():
    out = {}
    streaming = MODE in ("stream", "cancel")
    client = await create_client(URL, client_config=ClientConfig(streaming=streaming))
    if MODE == "send":
        task = await first_task(client, message("What is 2 + 3?"))
        out["task"] = task_summary(task)
        got = await client.get_task(GetTaskRequest(id=task.id))
        out["got"] = task_summary(got)
        out["cancel_done"] = await error_of(client.cancel_task(CancelTaskRequest(id=task.id)))
    elif MODE == "stream":
        kinds, states, text = [], [], ""
        async for response in client.send_message(message("What is 2 + 3?")):
            if response.HasField("task"):
                kinds.append("task")
                states.append(state(response.task.status))
            elif response.HasField("status_update"):
                kinds.append("status")
                states.append(state(response.status_update.status))
            elif response.HasField("artifact_update"):
                kinds.append("artifact")
                text += "".join(p.text for p in response.artifact_update.artifact.parts)
            else:
                kinds.append("other")
        out["stream"] = {"kinds": kinds, "states": states, "text": text}
    elif MODE == "input":
        task = await first_task(client, message("What is 2 + 3?"))
        out["paused"] = task_summary(task)
        answered = await first_task(
            client, message("approve", task.id, task.context_id, message_id="m2")
        )
        out["answered"] = task_summary(answered)
    elif MODE == "cancel":
        states, after_cancel, cancelled = [], [], None
        async for response in client.send_message(message("Think forever.")):
            if response.HasField("status_update"):
                states.append(state(response.status_update.status))
                if cancelled is not None:
                    after_cancel.append(state(response.status_update.status))
            elif response.HasField("artifact_update") and cancelled is None:
                task_id = response.artifact_update.task_id
                cancelled = task_summary(await client.cancel_task(CancelTaskRequest(id=task_id)))
        out["cancelled"] = cancelled
        out["states"] = states
        out["after_cancel"] = after_cancel
        out["got"] = task_summary(await client.get_task(GetTaskRequest(id=cancelled["id"])))
    elif MODE == "fail":
        out["task"] = task_summary(await first_task(client, message("hi")))
    elif MODE == "bad":
        no_text = SendMessageRequest(
            message=Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(url="https://x")])
        )
        out["no_text"] = await error_of(first_task(client, no_text))
        out["unknown_task"] = await error_of(client.get_task(GetTaskRequest(id="no-such-task")))
        out["answer_unknown_task"] = await error_of(
            first_task(client, message("approve", "no-such-task", "ctx"))
        )
    print(json.dumps(out))


asyncio.run(main())
