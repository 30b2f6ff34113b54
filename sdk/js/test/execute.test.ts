// One-shot tasks through the TypeScript SDK against the dev stack of internal/devstack's TestTypeScriptSDK
// (real runner, Claude Code CLI, scripted model): execute with wait, fetch by id, list, an idempotent retry,
// and the signed webhook received on a loopback server and verified with verifyWebhook.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import { Client, WarrenError, verifyWebhook } from "../src/index.js";
import { mintToken } from "../src/token.js";

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: these tests run from Go against a dev stack: go test ./internal/devstack -run TestTypeScriptSDK`);
  return v;
}

function client(user: string): Client {
  const token = mintToken(env("WARREN_SECRET"), { iss: env("WARREN_ISSUER"), sub: user, budget: { ai: 5_000_000, compute: 3600, window: "lifetime" } }, { kid: env("WARREN_KID") });
  return new Client(env("WARREN_URL"), token);
}

test("a task runs to completion, is kept, is idempotent and signs its webhook", async () => {
  let setURL: (u: string) => void = () => {};
  const hookURL = new Promise<string>((resolve) => (setURL = resolve));
  const got: Promise<{ headers: Record<string, string | string[] | undefined>; body: string }> = new Promise((resolve) => {
    const srv = createServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString("utf8")));
      req.on("end", () => {
        res.end();
        srv.close();
        resolve({ headers: req.headers, body });
      });
    });
    srv.listen(0, "127.0.0.1", () => {
      setURL(`http://127.0.0.1:${(srv.address() as AddressInfo).port}/hook`);
    });
  });
  const c = client("js-tasks");
  const task = await c.tasks.execute("create js.txt containing from js", { wait: true, webhookURL: await hookURL, idempotencyKey: "js-1" });
  assert.equal(task.status, "succeeded", JSON.stringify(task));
  assert.ok(task.result);
  assert.deepEqual(task.filesChanged, [{ path: "js.txt", change: "created" }]);
  assert.ok(task.cost && task.cost.ai_microdollars > 0 && task.totalCostUsd > 0);
  assert.equal(await c.sandbox.readText("js.txt"), "from js");

  const again = await c.tasks.get(task.id);
  assert.equal(again.result, task.result);
  assert.deepEqual((await c.tasks.list()).map((t) => t.id), [task.id]);
  const retry = await c.tasks.execute("create js.txt containing from js", { wait: true, webhookURL: await hookURL, idempotencyKey: "js-1" });
  assert.equal(retry.id, task.id);

  const hook = await got;
  const hooked = await verifyWebhook(env("WARREN_WEBHOOK_SECRET"), hook.headers, hook.body);
  assert.equal(hooked.id, task.id);
  await assert.rejects(verifyWebhook(env("WARREN_WEBHOOK_SECRET"), hook.headers, hook.body.replace("succeeded", "failed")));
  await assert.rejects(verifyWebhook("another-secret", hook.headers, hook.body));

  await assert.rejects(client("js-other").tasks.get(task.id), (e: unknown) => e instanceof WarrenError && e.code === "not_found");
  await assert.rejects(c.tasks.execute(" "), (e: unknown) => e instanceof WarrenError && e.code === "invalid_argument");
});
