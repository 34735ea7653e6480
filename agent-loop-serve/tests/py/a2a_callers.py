"""Two callers of agent-loop-serve's A2A server, each with its own bearer token, through the
official `a2a-sdk` client (its `AuthInterceptor` reads the scheme from the agent card).

Usage: a2a_callers.py BASE_URL MODE TOKEN_A [TOKEN_B]
  two:  A's task pauses (input-required); B tries A's task id (GetTask, CancelTask, a message
        answering it) and A's context id; A answers its task; a client with no token is refused.
  join: A streams a message; the artifact chunks are joined with the SDK's own
        `append_artifact_to_task` (append / lastChunk, as the spec says), then compared with
        what GetTask returns.
Prints one JSON object with what the clients saw, for the Rust test to assert on.
"""
import asyncio
import json
import sys

from a2a.client import ClientConfig, create_client
from a2a.client.auth.credentials import CredentialService
from a2a.client.auth.interceptor import AuthInterceptor
from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError

URL, MODE = sys.argv[1], sys.argv[2]
TOKENS = sys.argv[3:]


class Token(CredentialService):
    """Gives one token for any scheme the card declares."""

    def __init__(self, token):
        self.token = token
        self.asked = []

    async def get_credentials(self, security_scheme_name, context):
        self.asked.append(security_scheme_name)
        return self.token


def message(text, task_id=None, context_id=None, message_id="m1"):
    m = Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        m.task_id = task_id
    if context_id:
        m.context_id = context_id
    return SendMessageRequest(message=m)


def summary(task):
    status = task.status
    return {
        "id": task.id,
        "context_id": task.context_id,
        "state": TaskState.Name(status.state),
        "status_text": "".join(p.text for p in status.message.parts)
        if status.HasField("message")
        else None,
        "answer": "".join(p.text for a in task.artifacts for p in a.parts),
    }


async def outcome(awaitable):
    """The error's class name (and text), or "ok"."""
    try:
        await awaitable
        return {"ok": True}
    except Exception as e:  # noqa: BLE001 - the test asserts on the class
        return {"error": type(e).__name__, "text": str(e)}


async def first_task(client, request):
    async for response in client.send_message(request):
        if response.HasField("task"):
            return response.task
    raise RuntimeError("no task in the response")


async def client_with(token, streaming=False):
    creds = Token(token)
    client = await create_client(
        URL,
        client_config=ClientConfig(streaming=streaming),
        interceptors=[AuthInterceptor(creds)],
    )
    return client, creds


async def main():
    out = {}
    if MODE == "two":
        a, a_creds = await client_with(TOKENS[0])
        b, _ = await client_with(TOKENS[1])
        paused = await first_task(a, message("What is 2 + 3?", context_id="shared-ctx"))
        out["a_paused"] = summary(paused)
        out["a_schemes"] = a_creds.asked
        out["b_get"] = await outcome(b.get_task(GetTaskRequest(id=paused.id)))
        out["b_cancel"] = await outcome(b.cancel_task(CancelTaskRequest(id=paused.id)))
        out["b_answer"] = await outcome(
            first_task(b, message("approve", paused.id, paused.context_id, "m2"))
        )
        # A's task is untouched: A answers it, and it completes.
        out["a_got"] = summary(await a.get_task(GetTaskRequest(id=paused.id)))
        answered = await first_task(a, message("approve", paused.id, paused.context_id, "m3"))
        out["a_answered"] = summary(answered)
        # B names A's context: a conversation of B's own (the Rust test reads what the model got).
        out["b_in_a_context"] = summary(
            await first_task(b, message("Hello from B.", context_id=paused.context_id))
        )
        anonymous = await create_client(URL, client_config=ClientConfig(streaming=False))
        out["anonymous_send"] = await outcome(first_task(anonymous, message("hi")))
        out["anonymous_get"] = await outcome(anonymous.get_task(GetTaskRequest(id=paused.id)))
    elif MODE == "join":
        a, _ = await client_with(TOKENS[0], streaming=True)
        joined = Task()
        chunks, task_id = [], None
        async for response in a.send_message(message("What is 2 + 3?")):
            if response.HasField("task"):
                task_id = response.task.id
                joined.CopyFrom(response.task)
            elif response.HasField("artifact_update"):
                update = response.artifact_update
                chunks.append(
                    {
                        "text": "".join(p.text for p in update.artifact.parts),
                        "append": update.append,
                        "last_chunk": update.last_chunk,
                    }
                )
                append_artifact_to_task(joined, update)
            elif response.HasField("status_update"):
                chunks.append({"state": TaskState.Name(response.status_update.status.state)})
        got = await a.get_task(GetTaskRequest(id=task_id))
        out["chunks"] = chunks
        out["joined"] = "".join(p.text for art in joined.artifacts for p in art.parts)
        out["joined_artifacts"] = len(joined.artifacts)
        out["got"] = summary(got)
    print(json.dumps(out))


asyncio.run(main())
