// Interop check of `belay mcp` with the TypeScript MCP SDK's client: list
// the tools, send a fake run, subscribe to it, wait for the
// notifications/resources/updated, read the answer. It prints one JSON
// line with what it saw; the Go test judges it.
//
// Environment: MODE=stdio (BELAY_BIN, BELAY_DATA) or MODE=http (MCP_URL,
// MCP_TOKEN); REPLY is the answer the fake provider gives.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const env = process.env;
let transport;
if (env.MODE === "stdio") {
  transport = new StdioClientTransport({
    command: env.BELAY_BIN,
    args: ["mcp", "--data", env.BELAY_DATA, "--tag", "interop"],
    env: { ...env, BELAY_NO_AUTOSTART: "1" },
    stderr: "inherit",
  });
} else {
  transport = new StreamableHTTPClientTransport(new URL(env.MCP_URL), {
    requestInit: { headers: { Authorization: `Bearer ${env.MCP_TOKEN}` } },
  });
}
const client = new Client({ name: "ts-interop", version: "1.0.0" });
const updates = [];
let woken;
const wake = new Promise((resolve) => (woken = resolve));
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  updates.push(n.params.uri);
  woken(n.params.uri);
});
const timer = setTimeout(() => {
  console.error("interop: timed out");
  process.exit(3);
}, 60000);

await client.connect(transport);
const tools = (await client.listTools()).tools.map((t) => t.name);
const sent = await client.callTool({
  name: "send",
  arguments: {
    prompt: "interop",
    provider: "fake",
    script: { reply: env.REPLY, tokens: 20, rate: 100, firstToken: "200ms" },
  },
});
if (sent.isError) throw new Error("send failed: " + JSON.stringify(sent.content));
const run = sent.structuredContent;
await client.subscribeResource({ uri: run.uri });
const uri = await wake;
const res = await client.readResource({ uri: run.uri });
const body = JSON.parse(res.contents[0].text);
const bad = await client.callTool({ name: "status", arguments: { run: "not-a-run" } });
clearTimeout(timer);
console.log(
  JSON.stringify({
    protocol: client.getServerVersion()?.name,
    tools,
    run: run.run,
    uri,
    updates,
    status: body.run.status,
    answer: body.answer,
    badIsError: bad.isError === true,
    badText: bad.content?.[0]?.text ?? "",
  }),
);
await client.close();
process.exit(0);
