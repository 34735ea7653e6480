#!/usr/bin/env python3
"""The crate's strict schemas against the official strictifier.

tests/golden/strict_schemas.json holds schemas from Rust input types (schemars) and
hand-written edge cases, each with what `strict_schema` sends for OpenAI (written by
tests/providers/strict_schemas.rs, which fails when the crate sends anything else). This
script runs openai-agents' `ensure_strict_json_schema` (pinned in
scripts/golden-requirements.txt) on each input and holds the two against each other.

They must agree on what is sent, apart from the differences listed here, each with its
reason; both sides are normalised for these before they are compared:

1. Keywords OpenAI's strict mode does not list, which we move into the description
   (`minLength`, `maxLength`, `uniqueItems`, `default`, a `format` OpenAI does not list such
   as schemars' `uint32`, …) and annotations we drop (`title`, `$schema`, `examples`, …): the
   SDK sends them as they are. Both sides lose them, and the note we append to a description
   (`{minLength: 1}`) is taken off ours before the descriptions are compared.
2. Optional properties: we make each nullable (`["string", "null"]`, or `anyOf` with
   `{"type": "null"}`), so that the model can leave one out; the SDK marks it required and
   leaves its type as it is (pydantic makes `Optional` fields nullable itself). Both sides
   are compared with the `null` alternative taken off.
3. `required`: both list every property; compared as sets (ours is sorted).
4. Definitions no reference reaches any more (inlined everywhere they were used): we drop
   them, the SDK keeps them. Ours must be a subset of the SDK's.
5. A reference on a cycle beside a description (`{"$ref": "#", "description": …}`): the SDK
   fails on `#`; we keep the bare reference and move the description to the object around it.
   Such cases carry `sdk_differs` with the reason.
6. Schemas strict mode cannot express: we send the tool without strict (`not_strict`) where
   the SDK raises too (open maps) or keeps a keyword OpenAI does not list (`allOf`, which
   carries `sdk_differs`).

Exits non-zero on any other difference.
"""

import copy
import json
import pathlib
import re
import sys

from agents.strict_schema import ensure_strict_json_schema

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "strict_schemas.json"

OPENAI_FORMATS = {
    "date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid",
}
# What we move into the description or drop (difference 1).
MOVED_OR_DROPPED = {
    "minLength", "maxLength", "uniqueItems", "minProperties", "maxProperties", "contains",
    "minContains", "maxContains", "default", "$schema", "$id", "$comment", "title", "examples",
    "deprecated", "readOnly", "writeOnly", "contentEncoding", "contentMediaType",
}


NOTE = re.compile(r"\{(%s): " % "|".join(re.escape(k) for k in sorted(MOVED_OR_DROPPED | {"format"})))


def strip_note(description):
    """Our description without the keywords we moved into it (difference 1), or None."""
    at = description.rfind("\n\n{")
    note = description[at + 2:] if at >= 0 else description
    if note.endswith("}") and NOTE.match(note):
        return description[:at] if at >= 0 else None
    return description


def is_null(schema):
    return schema == {"type": "null"}


def normalise(schema, ours):
    """Both sides, with differences 1-3 taken off."""
    if isinstance(schema, list):
        return [normalise(s, ours) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in MOVED_OR_DROPPED:
            continue
        if key == "format" and value not in OPENAI_FORMATS:
            continue
        if key == "description" and ours:
            value = strip_note(value)
            if value is None:
                continue
        out[key] = value
    # Difference 2: the `null` alternative off.
    kind = out.get("type")
    if isinstance(kind, list) and "null" in kind and len(kind) > 1:
        kind = [k for k in kind if k != "null"]
        out["type"] = kind[0] if len(kind) == 1 else kind
        if isinstance(out.get("enum"), list):
            out["enum"] = [v for v in out["enum"] if v is not None]
    branches = out.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and any(map(is_null, branches)):
        (inner,) = [b for b in branches if not is_null(b)]
        del out["anyOf"]
        if isinstance(inner, dict):
            for key, value in inner.items():
                out.setdefault(key, value)
    result = {}
    for key, value in out.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            result[key] = {k: normalise(v, ours) for k, v in value.items()}
        elif key == "required" and isinstance(value, list):
            result[key] = sorted(value)
        else:
            result[key] = normalise(value, ours)
    return result


def prune_like_ours(sdk, ours):
    """Difference 4: the SDK's definitions that we no longer send, dropped."""
    for table in ("$defs", "definitions"):
        if table in sdk:
            kept = ours.get(table, {})
            extra = set(kept) - set(sdk[table])
            if extra:
                raise AssertionError(f"we send definitions the SDK does not: {sorted(extra)}")
            sdk[table] = {k: v for k, v in sdk[table].items() if k in kept}
            if not sdk[table]:
                del sdk[table]


def main():
    cases = json.loads(GOLDEN.read_text())
    failures = 0
    for case in cases:
        name = case["name"]
        ours = case["openai"]
        why = case.get("sdk_differs")
        try:
            sdk = ensure_strict_json_schema(copy.deepcopy(case["input"]))
            sdk_error = None
        except Exception as e:  # the SDK refuses with UserError, ValueError or TypeError
            sdk, sdk_error = None, f"{type(e).__name__}: {e}"
        ours_refused = isinstance(ours, dict) and "not_strict" in ours
        if ours_refused and sdk_error:
            print(f"agree   {name}: both refuse (ours: {ours['not_strict']})")
            continue
        if ours_refused or sdk_error:
            if why:
                print(f"differ  {name} (documented): {why}")
                continue
            failures += 1
            print(f"FAIL    {name}: ours {ours.get('not_strict') if ours_refused else 'strict'}, "
                  f"SDK {sdk_error or 'strict'}")
            continue
        try:
            prune_like_ours(sdk, ours)
        except AssertionError as e:
            failures += 1
            print(f"FAIL    {name}: {e}")
            continue
        left = normalise(ours, True)
        right = normalise(sdk, False)
        if left == right:
            print(f"agree   {name}")
        elif why:
            print(f"differ  {name} (documented): {why}")
        else:
            failures += 1
            print(f"FAIL    {name}: the schemas differ\n  ours: {json.dumps(left, sort_keys=True)}\n"
                  f"  SDK:  {json.dumps(right, sort_keys=True)}")
    print(f"strict schemas agreeing with openai-agents: {len(cases) - failures} of {len(cases)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
