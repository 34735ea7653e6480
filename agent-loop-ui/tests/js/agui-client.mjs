// The client side of tests/agui.rs, with the real AG-UI packages (@ag-ui/core,
// @ag-ui/client). Prints one JSON object on stdout for the Rust test to assert.
//
//   node tests/js/agui-client.mjs raw <url> <body-json>
//       POSTs the body, reads the raw SSE and checks every event with @ag-ui/core's
//       EventSchema and the whole sequence with @ag-ui/client's verifyEvents:
//       {"status", "events": [...], "schemaFailures": [...], "verifyError": null | "..."}
//   node tests/js/agui-client.mjs chat <url> <threadId> <text>
//       An HttpAgent runs one run on a user message:
//       {"result", "messages", "pendingInterrupts", "events": [types]}
//   node tests/js/agui-client.mjs approve <url> <threadId> <text>
//       An HttpAgent runs a run that pauses, then a second run whose resume entries approve
//       every interrupt, each carrying back the interrupt's metadata (its digest):
//       {"first": {...}, "second": {...}, "resume": [...]}
//   node tests/js/agui-client.mjs approve-stale <url> <threadId> <text> <digest>
//       As approve, but the second run's approval names <digest> (another call's); then a
//       third run approves with the interrupt's own metadata:
//       {"first", "stale": {"events", "runError", "thrown"}, "fresh"}
//   node tests/js/agui-client.mjs again <url> <threadId> <runId> <text>
//       An HttpAgent that sends a run's request again (its connection was lost): the same
//       threadId and runId: {"result", "messages", "pendingInterrupts", "events": [types]}

import { HttpAgent, verifyEvents, buildResumeArray } from "@ag-ui/client";
import { EventSchema } from "@ag-ui/core/schemas";
import { from, lastValueFrom, toArray } from "rxjs";

const [mode, url, ...rest] = process.argv.slice(2);

function parseSse(text) {
  const events = [];
  for (const frame of text.split("\n\n")) {
    const data = frame
      .split("\n")
      .filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(5).trimStart())
      .join("\n");
    if (data) events.push(JSON.parse(data));
  }
  return events;
}

async function raw(body) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body,
  });
  const text = await response.text();
  if (!response.ok) {
    return { status: response.status, body: text };
  }
  const events = parseSse(text);
  const schemaFailures = [];
  events.forEach((event, index) => {
    const parsed = EventSchema.safeParse(event);
    if (!parsed.success) {
      schemaFailures.push({ index, event, issues: parsed.error.issues });
    }
  });
  let verifyError = null;
  try {
    await lastValueFrom(from(events).pipe(verifyEvents(), toArray()));
  } catch (e) {
    verifyError = String(e?.message ?? e);
  }
  return { status: response.status, events, schemaFailures, verifyError };
}

function recorder() {
  const types = [];
  return {
    types,
    subscriber: {
      onEvent({ event }) {
        types.push(event.type);
      },
    },
  };
}

async function run(agent, params) {
  const { types, subscriber } = recorder();
  const { result } = await agent.runAgent(params, subscriber);
  return {
    result: result ?? null,
    messages: agent.messages,
    pendingInterrupts: agent.pendingInterrupts,
    events: types,
  };
}

async function chat(threadId, text) {
  const agent = new HttpAgent({ url, threadId });
  agent.addMessage({ id: "user-1", role: "user", content: text });
  return run(agent, { runId: "run-1" });
}

// The resume array approving every interrupt, each response carrying back the interrupt's
// metadata (its digest), or `{digest}` when one is given instead.
function approveAll(interrupts, digest) {
  const responses = {};
  for (const interrupt of interrupts) {
    responses[interrupt.id] = {
      status: "resolved",
      payload: { approved: true },
      metadata: digest ? { digest } : interrupt.metadata,
    };
  }
  return buildResumeArray(interrupts, responses);
}

async function approve(threadId, text) {
  const agent = new HttpAgent({ url, threadId });
  agent.addMessage({ id: "user-1", role: "user", content: text });
  const first = await run(agent, { runId: "run-1" });
  const resume = approveAll(agent.pendingInterrupts);
  const second = await run(agent, { runId: "run-2", resume });
  return { first, second, resume };
}

// A run that pauses; an approval naming the digest of another call (refused: the run's
// RUN_ERROR), then the approval the interrupt asked for (the run goes on).
async function approveStale(threadId, text, digest) {
  const agent = new HttpAgent({ url, threadId });
  agent.addMessage({ id: "user-1", role: "user", content: text });
  const first = await run(agent, { runId: "run-1" });
  const interrupts = structuredClone(agent.pendingInterrupts);
  let stale;
  const { types, subscriber } = recorder();
  let runError = null;
  try {
    await agent.runAgent(
      { runId: "run-2", resume: approveAll(interrupts, digest) },
      {
        ...subscriber,
        onRunErrorEvent({ event }) {
          runError = { message: event.message, code: event.code ?? null };
        },
      },
    );
    stale = { events: types, runError, thrown: null };
  } catch (e) {
    stale = { events: types, runError, thrown: String(e?.message ?? e) };
  }
  agent.pendingInterrupts = interrupts;
  const fresh = await run(agent, { runId: "run-3", resume: approveAll(interrupts) });
  return { first, stale, fresh };
}

let out;
switch (mode) {
  case "raw":
    out = await raw(rest[0]);
    break;
  case "chat":
    out = await chat(rest[0], rest[1]);
    break;
  case "approve":
    out = await approve(rest[0], rest[1]);
    break;
  case "approve-stale":
    out = await approveStale(rest[0], rest[1], rest[2]);
    break;
  case "again": {
    const agent = new HttpAgent({ url, threadId: rest[0] });
    agent.addMessage({ id: "u1", role: "user", content: rest[2] });
    out = await run(agent, { runId: rest[1] });
    break;
  }
  default:
    throw new Error(`unknown mode ${mode}`);
}
console.log(JSON.stringify(out));
