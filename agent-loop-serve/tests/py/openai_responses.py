"""Drives agent-loop-serve's Open Responses endpoint with the official `openai` client.

Usage: openai_responses.py BASE_URL (e.g. http://127.0.0.1:PORT/v1). The server's scripted
agent answers each request the same way: one call of `add`, then text. Prints one JSON object
with what the client saw, for the Rust test to assert on.
"""
import json
import sys

import openai
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0)
out = {}

# Streaming: the typed events the SDK parsed, in order.
stream = client.responses.create(model="served-agent", input="What is 2 + 3?", stream=True)
types, text, calls, outputs, final = [], "", [], [], None
for event in stream:
    types.append(event.type)
    if event.type == "response.output_text.delta":
        text += event.delta
    elif event.type == "response.output_item.done":
        item = event.item
        if item.type == "function_call":
            calls.append({"call_id": item.call_id, "name": item.name, "arguments": item.arguments})
        elif item.type == "function_call_output":
            outputs.append({"call_id": item.call_id, "output": item.output})
    elif event.type == "response.completed":
        final = event.response
out["stream"] = {
    "types": types,
    "text": text,
    "calls": calls,
    "outputs": outputs,
    "status": final.status if final else None,
    "output_text": final.output_text if final else None,
    "output_types": [i.type for i in final.output] if final else [],
    "total_tokens": final.usage.total_tokens if final and final.usage else None,
}

# Not streamed: the whole response object.
response = client.responses.create(
    model="served-agent",
    input=[
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi! What shall I add?"},
        {"role": "user", "content": [{"type": "input_text", "text": "2 and 3"}]},
    ],
)
out["whole"] = {
    "status": response.status,
    "model": response.model,
    "output_text": response.output_text,
    "output_types": [i.type for i in response.output],
}

# A bad request: the SDK raises its typed error with the spec's body.
try:
    client.responses.create(model="served-agent", input=[])
    out["bad"] = None
except openai.BadRequestError as e:
    out["bad"] = {"status": e.status_code, "type": e.type, "param": e.param, "message": e.message}

print(json.dumps(out))
