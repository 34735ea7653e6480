// Drives agent-loop-serve's MCP server with the official TypeScript client
// (@modelcontextprotocol/sdk, pinned in the root package.json) over streamable HTTP.
//
// Usage: node tests/js/mcp-client.mjs URL MODE, MODE one of:
//   call     list the tools, call ask_agent with a progress handler, then call it without a task;
//   approve  call it; answer each elicitation by approving;
//   deny     call it; answer each elicitation by denying, with a reason;
//   noelicit call it from a client that declares no elicitation capability;
//   cancel   call it, abort the call at its first progress notification, then call again until
//            the server is no longer busy with the first run.
// Prints one JSON object with what the client saw.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, mode] = process.argv.slice(2);
const capabilities = mode === "noelicit" ? {} : { elicitation: { form: {} } };
const client = new Client({ name: "agent-loop-serve-test", version: "1.0.0" }, { capabilities });
const elicitations = [];
if (mode !== "noelicit") {
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    elicitations.push({ message: request.params.message, schema: request.params.requestedSchema });
    if (mode === "deny") return { action: "accept", content: { approve: false, reason: "not today" } };
    return { action: "accept", content: { approve: true } };
  });
}
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);

const out = {
  protocolVersion: transport.protocolVersion ?? null,
  tools: (await client.listTools()).tools.map((t) => ({ name: t.name, required: t.inputSchema.required })),
};
const progress = [];
const text = (result) => result.content.map((c) => c.text).join("");

if (mode === "cancel") {
  const abort = new AbortController();
  try {
    await client.callTool({ name: "ask_agent", arguments: { task: "think forever" } }, undefined, {
      signal: abort.signal,
      onprogress: (p) => {
        progress.push(p.message);
        abort.abort("enough");
      },
    });
    out.first = "answered";
  } catch (e) {
    out.first = "aborted";
  }
  // The first run holds the only run slot until the server has cancelled it.
  for (let attempt = 0; attempt < 500; attempt++) {
    const result = await client.callTool({ name: "ask_agent", arguments: { task: "again" } });
    if (!text(result).includes("busy")) {
      out.second = { text: text(result), isError: !!result.isError, attempts: attempt + 1 };
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
} else {
  const result = await client.callTool({ name: "ask_agent", arguments: { task: "What is 2 + 3?" } }, undefined, {
    onprogress: (p) => progress.push(p.message),
  });
  out.result = { text: text(result), isError: !!result.isError };
  if (mode === "call") {
    const bad = await client.callTool({ name: "ask_agent", arguments: {} });
    out.bad = { text: text(bad), isError: !!bad.isError };
    try {
      await client.callTool({ name: "no_such_tool", arguments: {} });
      out.unknown = "answered";
    } catch (e) {
      out.unknown = { code: e.code ?? null };
    }
  }
}
out.progress = progress;
out.elicitations = elicitations;
console.log(JSON.stringify(out));
await client.close();
