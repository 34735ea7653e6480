#!/usr/bin/env python3
"""Checks the golden request bodies in tests/golden/ key by key against the official SDKs.

The Rust tests (tests/providers/gemini.rs, tests/providers/bedrock.rs, tests/providers/ollama.rs) assert that our encoders
produce exactly tests/golden/<format>_request.json. This script checks that those bodies are
what the providers' own SDKs would send, field by field:

- gemini: google-genai's pydantic types (`google.genai.types`), which forbid unknown fields,
  in the REST API's camelCase (contents, systemInstruction, tools, toolConfig,
  generationConfig).
- bedrock: botocore's `bedrock-runtime` service model, shape `ConverseStreamRequest`: every
  member known, every required member present, unions with exactly one member, enums and
  scalar types respected.
- ollama: the ollama client's `ChatRequest` pydantic model (and Message, Tool, Options):
  every key a declared field.
- anthropic / openai (strict tools): the anthropic SDK's `MessageCreateParamsStreaming`, the
  openai SDK's `CompletionCreateParamsStreaming` (Chat Completions) and
  `ResponseCreateParamsStreaming` (Responses) TypedDicts: every key declared, every required
  key present, literals and scalar types respected, recursively (tool `strict` included);
  context editing (`context_management`, a beta field) against the SDK's beta
  `MessageCreateParamsStreaming`.

Every key of our body must be declared by the SDK's type at its place, recursively; a value
must have the declared type. Prints one line per file (and each finding) and exits 1 when
any file is missing or has a finding. Run with the SDKs of scripts/golden-requirements.txt installed.
"""
import enum
import inspect
import json
import sys
import types as pytypes
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"


# ---------------------------------------------------------------- pydantic (genai, ollama)

def _is_model(t):
    from pydantic import BaseModel

    return inspect.isclass(t) and issubclass(t, BaseModel)


def _field_for(model, key):
    """The model's field a JSON key names: by field name or by alias (genai: camelCase)."""
    generator = model.model_config.get("alias_generator")
    for name, field in model.model_fields.items():
        if key == name or key == field.alias:
            return field
        if callable(generator) and key == generator(name):
            return field
    return None


def walk_pydantic(value, ann, path, errors):
    if ann is typing.Any or ann is object or ann is None:
        return
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Annotated:
        return walk_pydantic(value, args[0], path, errors)
    if origin in (typing.Union, pytypes.UnionType):
        alternatives = [a for a in args if a is not type(None)]
        if value is None and len(alternatives) < len(args):
            return
        # A dict is checked against the union's models only (ollama's Union[Mapping, Message]
        # would accept anything otherwise).
        if isinstance(value, dict) and any(_is_model(a) for a in alternatives):
            alternatives = [a for a in alternatives if _is_model(a)]
        attempts = []
        for alternative in alternatives:
            found = []
            walk_pydantic(value, alternative, path, found)
            if not found:
                return
            attempts.append(found)
        errors.extend(attempts[0] if attempts else [f"{path}: no type accepts {value!r}"])
        return
    import collections.abc as cabc

    if origin in (list, typing.List, cabc.Sequence, typing.Sequence):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            walk_pydantic(item, args[0] if args else typing.Any, f"{path}[{i}]", errors)
        return
    if origin in (dict, typing.Dict, cabc.Mapping, typing.Mapping):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object, got {type(value).__name__}")
            return
        for key, item in value.items():
            walk_pydantic(item, args[1] if len(args) == 2 else typing.Any, f"{path}.{key}", errors)
        return
    if origin is typing.Literal:
        if value not in args:
            errors.append(f"{path}: {value!r} is not one of {args}")
        return
    if _is_model(ann):
        if ann.__name__ == "Image" and ann.__module__.startswith("ollama") and isinstance(value, str):
            return  # ollama's Image serializes as its base64 string
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object ({ann.__name__}), got {type(value).__name__}")
            return
        for key, item in value.items():
            field = _field_for(ann, key)
            if field is None:
                errors.append(f"{path}.{key}: not a field of {ann.__module__}.{ann.__name__}")
                continue
            walk_pydantic(item, field.annotation, f"{path}.{key}", errors)
        return
    if inspect.isclass(ann) and issubclass(ann, enum.Enum):
        if value not in [m.value for m in ann]:
            errors.append(f"{path}: {value!r} is not a value of {ann.__name__}")
        return
    if ann is bool:
        if not isinstance(value, bool):
            errors.append(f"{path}: expected a boolean, got {value!r}")
        return
    if ann is int:
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(f"{path}: expected an integer, got {value!r}")
        return
    if ann is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append(f"{path}: expected a number, got {value!r}")
        return
    if ann in (str, bytes):
        # bytes travel as base64 strings in JSON (genai: ser_json_bytes = base64).
        if not isinstance(value, str):
            errors.append(f"{path}: expected a string, got {value!r}")
        return
    # Anything else (a callable, a datetime, a forward reference): not checked further.


def check_gemini(body):
    from google.genai import types as t

    top = {
        "contents": typing.List[t.Content],
        "systemInstruction": t.Content,
        "tools": typing.List[t.Tool],
        "toolConfig": t.ToolConfig,
        "generationConfig": t.GenerationConfig,
        "safetySettings": typing.List[t.SafetySetting],
        "cachedContent": str,
        "labels": typing.Dict[str, str],
    }
    errors = []
    for key, value in body.items():
        if key not in top:
            errors.append(f"$.{key}: not a field of the GenerateContent request")
            continue
        walk_pydantic(value, top[key], f"$.{key}", errors)
    if "contents" not in body:
        errors.append("$.contents: required")
    return errors


def check_ollama(body):
    from ollama._types import ChatRequest

    errors = []
    walk_pydantic(body, ChatRequest, "$", errors)
    for required in ("model", "messages"):
        if required not in body:
            errors.append(f"$.{required}: missing")
    return errors


# ---------------------------------------------------------------- TypedDicts (anthropic, openai)

def _is_typed_dict(t):
    return isinstance(t, type) and issubclass(t, dict) and hasattr(t, "__required_keys__")


def walk_typed(value, ann, path, errors, depth=0):
    import collections.abc as cabc

    if depth > 64 or ann is typing.Any or ann is object or ann is None:
        return
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin in (typing.Required, typing.NotRequired, typing.Annotated):
        return walk_typed(value, args[0], path, errors, depth + 1)
    if origin in (typing.Union, pytypes.UnionType):
        alternatives = [a for a in args if a is not type(None)]
        if value is None and len(alternatives) < len(args):
            return
        attempts = []
        for alternative in alternatives:
            found = []
            walk_typed(value, alternative, path, found, depth + 1)
            if not found:
                return
            attempts.append(found)
        # The closest alternative's findings: the one with the fewest.
        errors.extend(min(attempts, key=len) if attempts else [f"{path}: no type accepts {value!r}"])
        return
    if origin is typing.Literal:
        if value not in args:
            errors.append(f"{path}: {value!r} is not one of {args}")
        return
    if origin in (list, typing.List, cabc.Sequence, cabc.Iterable) or (
        origin is not None and getattr(origin, "__name__", "") == "SequenceNotStr"
    ):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            walk_typed(item, args[0] if args else typing.Any, f"{path}[{i}]", errors, depth + 1)
        return
    if origin in (dict, typing.Dict, cabc.Mapping):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object, got {type(value).__name__}")
            return
        for key, item in value.items():
            walk_typed(item, args[1] if len(args) == 2 else typing.Any, f"{path}.{key}", errors, depth + 1)
        return
    if _is_typed_dict(ann):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object ({ann.__name__}), got {type(value).__name__}")
            return
        hints = typing.get_type_hints(ann, include_extras=True)
        for key, item in value.items():
            if key not in hints:
                errors.append(f"{path}.{key}: not a key of {ann.__module__}.{ann.__name__}")
                continue
            walk_typed(item, hints[key], f"{path}.{key}", errors, depth + 1)
        # The SDKs use `from __future__ import annotations`, so `__required_keys__` misses
        # the `Required[...]` keys of a total=False TypedDict: read them from the hints.
        required = set(ann.__required_keys__) | {
            k for k, h in hints.items() if typing.get_origin(h) is typing.Required
        }
        for key in sorted(required):
            if key not in value:
                errors.append(f"{path}.{key}: required by {ann.__name__}")
        return
    if ann is bool:
        if not isinstance(value, bool):
            errors.append(f"{path}: expected a boolean, got {value!r}")
        return
    if ann is int:
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(f"{path}: expected an integer, got {value!r}")
        return
    if ann is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append(f"{path}: expected a number, got {value!r}")
        return
    if ann is str:
        if not isinstance(value, str):
            errors.append(f"{path}: expected a string, got {value!r}")
        return
    # Anything else (a type alias the SDK leaves open, a forward reference): not checked.


def check_anthropic(body):
    from anthropic.types.message_create_params import MessageCreateParamsStreaming

    errors = []
    walk_typed(body, MessageCreateParamsStreaming, "$", errors)
    return errors


def check_anthropic_beta(body):
    from anthropic.types.beta.message_create_params import MessageCreateParamsStreaming

    errors = []
    walk_typed(body, MessageCreateParamsStreaming, "$", errors)
    return errors


def check_openai_chat(body):
    from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

    errors = []
    walk_typed(body, CompletionCreateParamsStreaming, "$", errors)
    return errors


def check_responses(body):
    from openai.types.responses.response_create_params import ResponseCreateParamsStreaming

    errors = []
    walk_typed(body, ResponseCreateParamsStreaming, "$", errors)
    return errors


def check_responses_compact(body):
    from openai.types.responses.response_compact_params import ResponseCompactParams

    errors = []
    walk_typed(body, ResponseCompactParams, "$", errors)
    return errors


# ---------------------------------------------------------------- botocore (bedrock)

def walk_shape(value, shape, path, errors):
    kind = shape.type_name
    if shape.metadata.get("document"):
        return  # free-form JSON (tool inputs, schemas, additionalModelRequestFields)
    if kind == "structure":
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object ({shape.name}), got {type(value).__name__}")
            return
        members = shape.members
        for key, item in value.items():
            if key not in members:
                errors.append(f"{path}.{key}: not a member of {shape.name}")
                continue
            walk_shape(item, members[key], f"{path}.{key}", errors)
        for required in shape.metadata.get("required", []):
            if required not in value and members[required].serialization.get("location") is None:
                errors.append(f"{path}.{required}: required by {shape.name}")
        if shape.metadata.get("union"):
            if len(value) != 1:
                errors.append(f"{path}: union {shape.name} must set exactly one member, has {sorted(value)}")
        return
    if kind == "list":
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list ({shape.name})")
            return
        for i, item in enumerate(value):
            walk_shape(item, shape.member, f"{path}[{i}]", errors)
        return
    if kind == "map":
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object ({shape.name})")
            return
        for key, item in value.items():
            walk_shape(item, shape.value, f"{path}.{key}", errors)
        return
    if kind == "document":
        return
    if kind in ("string", "blob", "timestamp"):
        if not isinstance(value, str):
            errors.append(f"{path}: expected a string ({shape.name}), got {value!r}")
        elif shape.metadata.get("enum") and value not in shape.metadata["enum"]:
            errors.append(f"{path}: {value!r} is not one of {shape.metadata['enum']}")
        return
    if kind in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(f"{path}: expected an integer ({shape.name}), got {value!r}")
        return
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append(f"{path}: expected a number ({shape.name}), got {value!r}")
        return
    if kind == "boolean":
        if not isinstance(value, bool):
            errors.append(f"{path}: expected a boolean ({shape.name}), got {value!r}")
        return


def check_bedrock(body):
    import botocore.loaders
    import botocore.model

    loader = botocore.loaders.Loader()
    model = botocore.model.ServiceModel(loader.load_service_model("bedrock-runtime", "service-2"))
    shape = model.operation_model("ConverseStream").input_shape
    errors = []
    # modelId travels in the URL path, never in the body.
    for key in body:
        member = shape.members.get(key)
        if member is not None and member.serialization.get("location"):
            errors.append(f"$.{key}: {shape.name}.{key} goes in the {member.serialization['location']}, not the body")
    walk_shape(body, shape, "$", errors)
    return errors


CHECKS = {
    "gemini_request.json": ("google-genai types", check_gemini),
    "bedrock_request.json": ("botocore bedrock-runtime ConverseStreamRequest", check_bedrock),
    "ollama_request.json": ("ollama ChatRequest", check_ollama),
    "anthropic_strict_request.json": ("anthropic MessageCreateParamsStreaming", check_anthropic),
    "anthropic_tool_search_request.json": ("anthropic MessageCreateParamsStreaming", check_anthropic),
    "anthropic_context_editing_request.json": (
        "anthropic beta MessageCreateParamsStreaming", check_anthropic_beta),
    "anthropic_compaction_request.json": (
        "anthropic beta MessageCreateParamsStreaming", check_anthropic_beta),
    "openai_strict_request.json": ("openai CompletionCreateParamsStreaming", check_openai_chat),
    "responses_compaction_request.json": ("openai ResponseCreateParamsStreaming", check_responses),
    "responses_strict_request.json": ("openai ResponseCreateParamsStreaming", check_responses),
    "responses_compact_request.json": ("openai ResponseCompactParams", check_responses_compact),
    "responses_tool_search_request.json": ("openai ResponseCreateParamsStreaming", check_responses),
}


def main():
    failed = False
    checked = 0
    for name, (what, check) in CHECKS.items():
        path = GOLDEN / name
        if not path.exists():
            print(f"golden: {path.relative_to(ROOT)} is missing")
            failed = True
            continue
        body = json.loads(path.read_text())
        errors = check(body)
        checked += 1
        if errors:
            failed = True
            print(f"golden: {name} against {what}: {len(errors)} finding(s)")
            for error in errors:
                print(f"  {error}")
        else:
            print(f"golden: {name} matches {what}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
