// The TypeScript SDK (@modelcontextprotocol/server 2.4.0, from npm) refusing with -32021: a tool whose input request
// (a form) the client did not declare it can show. unasked.log is what it printed, captured by
//   npm install @modelcontextprotocol/server@2.4.0 zod && node unasked.mjs > unasked.log 2>&1
// Its one line is the answer on the wire, nothing on stderr: the onerror hooks (the server's and the handler's, both
// set) are not called for a -32021, so the SDK logs no line a reason adapter could read for it (harness.logs.adapters).
import { McpServer, createMcpHandler, inputRequired } from "@modelcontextprotocol/server";
import * as z from "zod";
const factory = () => {
  const server = new McpServer({ name: "ts-mrtr", version: "1.0.0" });
  server.server.onerror = (error) => console.error(error);
  server.registerTool("refund", { inputSchema: z.object({}) }, async (args, ctx) => {
    return inputRequired({ inputRequests: { confirm: inputRequired.elicit({ message: "Refund?", requestedSchema: z.object({ ok: z.boolean() }) }) } });
  });
  return server;
};
const handler = createMcpHandler(factory, { onerror: (error) => console.error(error), });
const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/clientInfo": { name: "t", version: "1" } };
async function call(id) {
  const body = { jsonrpc: "2.0", id, method: "tools/call", params: { name: "refund", arguments: {}, _meta: meta } };
  const r = await handler.fetch(new Request("http://127.0.0.1/mcp", { method: "POST", body: JSON.stringify(body),
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "refund" } }));
  return [r.status, await r.text()];
}
console.log("unasked", JSON.stringify(await call(1)));
