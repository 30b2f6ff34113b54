// The user's app (Node 20+ or a browser): run a command in the user's sandbox, then one agent turn that
// may call a tool this program answers.
// Run: WARREN_URL=http://127.0.0.1:8080 WARREN_TOKEN=$(bin/warren token -user alice) npx tsx examples/agent.ts

import { Client, ToolServer, isResult, isWarrenError } from "@warren/sdk";

const client = new Client(process.env.WARREN_URL ?? "http://127.0.0.1:8080", process.env.WARREN_TOKEN ?? "");

// The sandbox API: commands, files, background processes, previews.
const res = await client.sandbox.exec({ command: "echo hi > hello.txt && cat hello.txt" });
console.log(res.exitCode, res.stdout.trim()); // 0 hi
console.log(await client.sandbox.readText("hello.txt"));

// A client tool: the agent sees it as mcp__crm__lookup; the handler runs here, not in the sandbox.
const crm = new ToolServer("crm", [
  {
    name: "lookup",
    description: "Look a customer up by id",
    inputSchema: { type: "object", properties: { id: { type: "string" } }, required: ["id"] },
    handler: (input) => `customer ${String(input.id)}: Ada, plan pro`,
  },
]);

const session = await client.connect({ tools: [crm] });
try {
  for await (const m of session.prompt("Look customer 7 up and write their plan to plan.txt")) {
    if (isResult(m)) console.log(m.result, `$${m.total_cost_usd}`);
  }
} catch (e) {
  if (isWarrenError(e, "budget_exceeded")) console.error("out of budget for today");
  else throw e;
} finally {
  await session.close();
}
