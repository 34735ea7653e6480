// The client side of tests/ai_sdk.rs: the `ai` package's own code reads the server's UI
// message stream, and the script prints what it saw as one JSON object on stdout.
//
//   node tests/js/ai-sdk-client.mjs read <url>
//     POSTs one user message the way DefaultChatTransport does; validates every chunk with
//     `parseJsonEventStream` + `uiMessageChunkSchema`, and builds the message with
//     `readUIMessageStream`. Prints {status, header, chunks, invalid, message, errors}.
//
//   node tests/js/ai-sdk-client.mjs chat <url> approve|deny
//     Drives the package's chat client (`AbstractChat` over an in-memory state, with
//     `DefaultChatTransport` and `sendAutomaticallyWhen:
//     lastAssistantMessageIsCompleteWithApprovalResponses`): sends a message, answers the
//     approval request with `addToolApprovalResponse`, lets the chat resend by itself.
//     Prints {first, final, requests, status, error, finishes, data}; without an approval
//     request in the answer, {first, …} as the chat holds them after the first request.
//
//   node tests/js/ai-sdk-client.mjs resume <url> <chatId>
//     A chat client that comes back (a reloaded page): `resumeStream()`, which GETs
//     `{url}/{chatId}/stream`. Prints {messages, status, error}.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
} from "ai";

const [mode, url, verdict] = process.argv.slice(2);

function streamOf(bytes) {
  return new ReadableStream({
    start(controller) {
      controller.enqueue(bytes);
      controller.close();
    },
  });
}

async function read() {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      id: "chat-read",
      messages: [
        {
          id: "u1",
          role: "user",
          parts: [{ type: "text", text: "Look something up." }],
        },
      ],
      trigger: "submit-message",
    }),
  });
  const bytes = new Uint8Array(await response.arrayBuffer());
  const chunks = [];
  const invalid = [];
  const parsed = parseJsonEventStream({
    stream: streamOf(bytes),
    schema: uiMessageChunkSchema,
  });
  for await (const result of parsed) {
    if (result.success) chunks.push(result.value);
    else invalid.push(String(result.error));
  }
  // The chunks, as DefaultChatTransport hands them on, into a UIMessage.
  const valid = new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk);
      controller.close();
    },
  });
  const errors = [];
  let message = null;
  for await (const snapshot of readUIMessageStream({
    stream: valid,
    onError: (e) => errors.push(String(e)),
  })) {
    message = snapshot;
  }
  return {
    status: response.status,
    header: response.headers.get("x-vercel-ai-ui-message-stream"),
    contentType: response.headers.get("content-type"),
    chunks,
    invalid,
    message,
    errors,
  };
}

class MemoryState {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) {
    this.messages = this.messages.concat(message);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = [
      ...this.messages.slice(0, index),
      message,
      ...this.messages.slice(index + 1),
    ];
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

class Chat extends AbstractChat {
  constructor(options) {
    super({ ...options, state: new MemoryState() });
  }
}

async function chat() {
  const requests = [];
  const finishes = [];
  const data = [];
  let onFinished = () => {};
  const recordingFetch = async (input, init) => {
    const body = JSON.parse(init.body);
    requests.push({
      trigger: body.trigger,
      messageId: body.messageId ?? null,
      roles: body.messages.map((m) => m.role),
      lastParts: body.messages.at(-1).parts,
    });
    return fetch(input, init);
  };
  const client = new Chat({
    id: "chat-approval",
    transport: new DefaultChatTransport({ api: url, fetch: recordingFetch }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: ({ finishReason, isError }) => {
      finishes.push({ finishReason: finishReason ?? null, isError });
      onFinished();
    },
    onData: (part) => data.push(part),
  });

  await client.sendMessage({ text: "Delete a.txt" });
  const first = structuredClone(client.messages);
  const part = client.lastMessage.parts.find(
    (p) => p.type.startsWith("tool-") && p.state === "approval-requested",
  );
  if (part == null) {
    return {
      first,
      final: null,
      requests,
      status: client.status,
      error: client.error ? String(client.error) : null,
      finishes,
      data,
    };
  }
  // The chat resends by itself once every approval of the last step is answered; wait for
  // that request's end (onFinish), not for a clock.
  const second = new Promise((resolve) => {
    onFinished = resolve;
  });
  await client.addToolApprovalResponse({
    id: part.approval.id,
    approved: verdict === "approve",
    reason: verdict === "approve" ? undefined : "not that file",
  });
  await second;
  return {
    first,
    final: structuredClone(client.messages),
    requests,
    status: client.status,
    error: client.error ? String(client.error) : null,
    finishes,
    data,
  };
}

async function resume() {
  const client = new Chat({
    id: verdict,
    transport: new DefaultChatTransport({ api: url }),
  });
  await client.resumeStream();
  return {
    messages: structuredClone(client.messages),
    status: client.status,
    error: client.error ? String(client.error) : null,
  };
}

const result =
  mode === "read" ? await read() : mode === "resume" ? await resume() : await chat();
process.stdout.write(JSON.stringify(result));
