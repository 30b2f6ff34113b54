// Tests of client tool calls across a reconnect and of tool server names, over a scripted connection (the
// edge's side of the protocol played by the test: what a runner sends after a failover).

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  type CloseInfo,
  type Connection,
  Session,
  ToolCalls,
  ToolServer,
  type Transport,
  WarrenError,
  maxDeliveredCalls,
  maxKeptAnswers,
  textResult,
  toolCall,
  validMCPServerName,
} from "../src/index.js";

type Msg = Record<string, unknown> & { type: string; seq?: number; payload?: Record<string, unknown> };

// One connection: answers init with a control ready of session s1; what the session sends is recorded.
class ScriptedConn implements Connection {
  readonly sent: Msg[] = [];
  readonly closed: Promise<CloseInfo>;
  private inbox: (string | undefined)[] = [];
  private waiter?: () => void;
  private end!: (info: CloseInfo) => void;
  private gone = false;

  constructor() {
    this.closed = new Promise((r) => (this.end = r));
  }

  deliver(m: Msg): void {
    this.inbox.push(JSON.stringify(m));
    this.waiter?.();
  }

  send(text: string): void {
    if (this.gone) throw new WarrenError("unavailable", "connection lost");
    const m = JSON.parse(text) as Msg;
    this.sent.push(m);
    if (m.type === "init") this.deliver({ type: "control", payload: { action: "ready", data: { sessionId: "s1" } } });
  }

  async receive(): Promise<string | undefined> {
    for (;;) {
      if (this.inbox.length) return this.inbox.shift();
      if (this.gone) return undefined;
      await new Promise<void>((r) => (this.waiter = r));
      this.waiter = undefined;
    }
  }

  private finish(info: CloseInfo): void {
    if (this.gone) return;
    this.gone = true;
    this.end(info);
    this.waiter?.();
  }

  close(code: number, reason = ""): void {
    this.finish({ code, reason, clean: true });
  }

  abort(): void {
    this.finish({ code: 1006, reason: "", clean: false });
  }

  results(callId: string): Msg[] {
    return this.sent.filter((m) => m.type === "tool_result" && m.payload?.callId === callId);
  }
}

class ScriptedTransport implements Transport {
  readonly name = "scripted";
  readonly conns: ScriptedConn[] = [];
  private waiter?: () => void;

  async connect(): Promise<Connection> {
    const c = new ScriptedConn();
    this.conns.push(c);
    this.waiter?.();
    return c;
  }

  async nth(i: number): Promise<ScriptedConn> {
    while (this.conns.length <= i) await new Promise<void>((r) => (this.waiter = r));
    return this.conns[i];
  }
}

// Waits (without a clock) until cond holds.
async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setImmediate(r));
}

const call = (seq: number, callId: string): Msg => ({
  type: "tool_call",
  seq,
  payload: { callId, toolName: "mcp__app__lookup", input: { q: callId } },
});

test("a tool call the runner sends again after a reconnect runs its handler once and its answer is sent again", async () => {
  const runs = new Map<string, number>();
  const app = new ToolServer("app", [
    {
      name: "lookup",
      handler: (input) => {
        const q = String(input.q);
        runs.set(q, (runs.get(q) ?? 0) + 1);
        return `answer ${q}`;
      },
    },
  ]);
  const tr = new ScriptedTransport();
  const s = await Session.open({ url: "http://edge.invalid", token: "t", transport: tr }, { tools: [app], reconnect: { minBackoffMs: 1, maxBackoffMs: 1 } });
  const a = await tr.nth(0);
  a.deliver(call(1, "c1"));
  await until(() => a.results("c1").length === 1);
  a.abort(); // the answer may not have reached the runner: it sends c1 again on the new connection
  const b = await tr.nth(1);
  await until(() => b.sent.some((m) => m.type === "init"));
  b.deliver(call(2, "c1"));
  b.deliver(call(3, "c2"));
  b.deliver({ type: "result", seq: 4, subtype: "success" });

  const seen: string[] = [];
  for (;;) {
    const r = await s.next();
    assert.equal(r.done, false);
    const c = toolCall(r.value!);
    if (c) seen.push(c.callId);
    if (r.value!.type === "result") break;
  }
  assert.deepEqual(seen, ["c1", "c2"], "each call is delivered to the application once");
  await until(() => b.results("c1").length === 1 && b.results("c2").length === 1);
  assert.deepEqual(Object.fromEntries(runs), { c1: 1, c2: 1 }, "one handler run per call");
  assert.deepEqual(b.results("c1")[0].payload?.result, textResult("answer c1"), "c1's answer is sent again through the new connection");
  await s.close();
});

test("the callIds and answers a session remembers are bounded", () => {
  const c = new ToolCalls();
  for (let i = 0; i < maxDeliveredCalls + 10; i++) {
    assert.equal(c.deliver(String(i)).first, true);
    c.answer(String(i), textResult(String(i)));
  }
  assert.deepEqual(c.size, { delivered: maxDeliveredCalls, answers: maxKeptAnswers });
  const last = c.deliver(String(maxDeliveredCalls + 9));
  assert.equal(last.first, false);
  assert.deepEqual(last.answer, textResult(String(maxDeliveredCalls + 9)));
  assert.equal(c.deliver("0").first, true, "the oldest callId is forgotten");
});

test("a tool server name that would not read back (containing __ or ending with _) is refused, typed", () => {
  for (const name of ["app__lookup", "app_", "__", "a__b", "x_", "", "a b", "a".repeat(65)]) {
    assert.equal(validMCPServerName(name), false, name);
    assert.throws(
      () => new ToolServer(name, [{ name: "x", handler: () => "" }]),
      (e: unknown) => e instanceof WarrenError && e.code === "invalid_argument",
      name,
    );
  }
  for (const name of ["app", "a_b", "a-b", "_a", "a".repeat(64)]) {
    assert.equal(validMCPServerName(name), true, name);
    assert.equal(new ToolServer(name, [{ name: "x", handler: () => "" }]).name, name);
  }
  // Server "app" does not answer what the agent reads as server app's tool "_x" of a server "app_".
  assert.equal(new ToolServer("app", [{ name: "x", handler: () => "" }]).lookup("mcp__app___x"), undefined);
});
