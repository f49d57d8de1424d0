// A 2026-07-28 server on the TypeScript SDK (@modelcontextprotocol/server 2.4.0, from npm), whose requestState
// seam refuses a tampered, a malformed and an expired state; rejections.log is its stderr, as captured by
//   npm install @modelcontextprotocol/server@2.4.0 zod && node server.mjs 2> rejections.log
// with the install directory in the stack frames shortened to file:///srv/ts-mrtr/ (no machine path kept).
import { McpServer, createMcpHandler, createRequestStateCodec, inputRequired } from "@modelcontextprotocol/server";
import * as z from "zod";
const codec = createRequestStateCodec({ key: "k".repeat(32), ttlSeconds: 1 });
const factory = () => {
  const server = new McpServer({ name: "ts-mrtr", version: "1.0.0" }, { requestState: { verify: codec.verify } });
  server.server.onerror = (error) => console.error(error);
  server.registerTool("refund", { inputSchema: z.object({}) }, async (args, ctx) => {
    const state = ctx.mcpReq.requestState();
    if (state === undefined) return inputRequired({ requestState: await codec.mint({ step: 1 }) });
    return { content: [{ type: "text", text: "ok" }] };
  });
  return server;
};
const handler = createMcpHandler(factory, { onerror: (error) => console.error(error), });
const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/clientInfo": { name: "t", version: "1" } };
async function call(state, id) {
  const body = { jsonrpc: "2.0", id, method: "tools/call", params: { name: "refund", arguments: {}, _meta: meta, ...(state ? { requestState: state } : {}) } };
  const r = await handler.fetch(new Request("http://127.0.0.1/mcp", { method: "POST", body: JSON.stringify(body),
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "refund" } }));
  return [r.status, await r.text()];
}
const first = await call(undefined, 1);
console.log("first", JSON.stringify(first));
const state = JSON.parse(first[1]).result?.requestState;
console.log("tampered", JSON.stringify(await call(state.slice(0, -3) + "AAA", 2)));
console.log("malformed", JSON.stringify(await call("nope", 3)));
await new Promise((r) => setTimeout(r, 2100));
console.log("expired", JSON.stringify(await call(state, 4)));
