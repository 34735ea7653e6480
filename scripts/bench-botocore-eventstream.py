#!/usr/bin/env python3
"""botocore's AWS event-stream parser on the Bedrock bodies of `cargo bench --bench wire`.

The baseline for the Bedrock row of BENCHMARKS.md: botocore (the AWS SDK for Python, pinned in
scripts/golden-requirements.txt) frames the same bytes with `EventStreamBuffer` (prelude,
headers, both CRC32 checks), alone and with each payload parsed by `json.loads` (what our
decoder also does before it emits events). Write the bytes first:

    AGENT_LOOP_BEDROCK_BODY=/tmp/bedrock.bin cargo bench --bench wire -- formats/bedrock
    python scripts/bench-botocore-eventstream.py /tmp/bedrock.bin

It feeds 4 KiB chunks, as the Rust bench does, and prints the best of five runs.
"""
import json
import sys
import time

from botocore.eventstream import EventStreamBuffer


def frame(body, parse):
    buffer = EventStreamBuffer()
    messages = 0
    for at in range(0, len(body), 4096):
        buffer.add_data(body[at : at + 4096])
        for message in buffer:
            if parse:
                json.loads(message.payload)
            messages += 1
    return messages


def main():
    body = open(sys.argv[1], "rb").read()
    for parse in (False, True):
        best = None
        for _ in range(5):
            start = time.perf_counter()
            messages = frame(body, parse)
            elapsed = time.perf_counter() - start
            best = elapsed if best is None else min(best, elapsed)
        what = "framing + json.loads" if parse else "framing only"
        print(
            f"botocore {what}: {len(body)} bytes, {messages} messages in {best * 1e3:.1f} ms "
            f"({len(body) / best / 1e6:.1f} MB/s)"
        )


if __name__ == "__main__":
    main()
