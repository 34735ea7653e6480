#!/usr/bin/env bash
# Seeds the fuzz corpora (fuzz/corpus/<target>/, git-ignored) from real stream bodies:
#   - tests/fixtures/{anthropic,openai}/*.sse       (or $AGENT_LOOP_FIXTURES/{anthropic,openai})
#   - the SDK transcripts, ../shared/transcripts/*.sse (or $AGENT_LOOP_TRANSCRIPTS), when present.
# Each seed is a 0x00 byte (the input layout's "no cut points", see fuzz/src/lib.rs) followed by
# the body. The `sse` target gets every body; `anthropic`, `openai` and `responses` get their
# format's (tests/fixtures/responses/*.sse, transcripts named openai_responses_*); `gemini`,
# `bedrock` and `ollama` every file of tests/fixtures/<format>/.
# Safe to run again: files are named by content hash, so nothing is duplicated.
set -euo pipefail

fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$fuzz_dir")"
fixtures="${AGENT_LOOP_FIXTURES:-$root/tests/fixtures}"
transcripts="${AGENT_LOOP_TRANSCRIPTS:-$root/../shared/transcripts}"

seed() { # seed <target> <file>
    local dir="$fuzz_dir/corpus/$1" tmp
    mkdir -p "$dir"
    tmp="$(mktemp)"
    { printf '\000'; cat "$2"; } > "$tmp"
    mv "$tmp" "$dir/seed-$(sha1sum < "$tmp" | cut -c1-16)"
}

count=0
for provider in anthropic openai responses; do
    for file in "$fixtures/$provider"/*.sse "$transcripts/${provider}"_*.sse; do
        [ -f "$file" ] || continue
        case "$provider:$(basename "$file")" in
            openai:openai_responses_*) continue ;; # a Responses transcript, seeded below
        esac
        seed sse "$file"
        seed "$provider" "$file"
        count=$((count + 1))
    done
done
for file in "$transcripts"/openai_responses_*.sse; do
    [ -f "$file" ] || continue
    seed sse "$file"
    seed responses "$file"
    count=$((count + 1))
done
# Gemini (SSE), Bedrock (AWS event stream) and Ollama (NDJSON): every fixture body of the
# format (tests/fixtures/<format>/*, whatever its extension).
for provider in gemini bedrock ollama; do
    for file in "$fixtures/$provider"/*; do
        [ -f "$file" ] || continue
        [ "$provider" = gemini ] && seed sse "$file"
        seed "$provider" "$file"
        count=$((count + 1))
    done
done
mkdir -p "$fuzz_dir/corpus/request_encoding"
echo "seeded $count bodies into $fuzz_dir/corpus/{sse,anthropic,openai,responses,gemini,bedrock,ollama}"
