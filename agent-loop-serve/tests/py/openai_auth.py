"""The official `openai` client against an Open Responses endpoint with bearer tokens.

Usage: openai_auth.py BASE_URL GOOD_KEY. The SDK sends its api_key as `Authorization: Bearer`.
Prints one JSON object: what a request with the good key and one with a wrong key got.
"""
import json
import sys

import openai
from openai import OpenAI

URL, KEY = sys.argv[1], sys.argv[2]
out = {}

good = OpenAI(base_url=URL, api_key=KEY, max_retries=0)
out["good"] = good.responses.create(model="served-agent", input="Hello?").output_text

for name, client in [
    ("wrong", OpenAI(base_url=URL, api_key="not-" + KEY, max_retries=0)),
]:
    try:
        client.responses.create(model="served-agent", input="Hello?")
        out[name] = None
    except openai.AuthenticationError as e:
        out[name] = {
            "class": type(e).__name__,
            "status": e.status_code,
            "type": e.type,
            "code": e.code,
            "message": e.message,
        }

print(json.dumps(out))
