// A prompt's identity (docs/PROTOCOL.md#prompt-identity), against a scripted in-memory transport that
// plays the runner: Prompt ends on its own turn, and a prompt whose turn had not started is sent again
// with the same uuid after a reconnect.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, type CloseInfo, type Connection, type ServerMessage, type Transport } from "../src/index.js";

type Script = (conn: FakeConn, msg: Record<string, unknown>) => void;

// FakeConn is one connection: what the client sends goes to script, which answers with emit.
class FakeConn implements Connection {
  private inbox: string[] = [];
  private waiter?: () => void;
  private ended = false;
  private settle!: (c: CloseInfo) => void;
  readonly closed = new Promise<CloseInfo>((r) => (this.settle = r));
  constructor(private script: Script) {}
  emit(seq: number, m: Record<string, unknown>): void {
    this.inbox.push(JSON.stringify({ seq, ...m }));
    this.waiter?.();
  }
  send(text: string): void {
    if (this.ended) throw new Error("closed");
    this.script(this, JSON.parse(text) as Record<string, unknown>);
  }
  async receive(): Promise<string | undefined> {
    for (;;) {
      const m = this.inbox.shift();
      if (m !== undefined) return m;
      if (this.ended) return undefined;
      await new Promise<void>((r) => (this.waiter = r));
    }
  }
  close(code: number, reason = ""): void {
    this.end({ code, reason, clean: true });
  }
  abort(): void {
    this.end({ code: 1006, reason: "", clean: false });
  }
  private end(c: CloseInfo): void {
    if (this.ended) return;
    this.ended = true;
    this.settle(c);
    this.waiter?.();
  }
}

class FakeTransport implements Transport {
  readonly name = "fake";
  conns: FakeConn[] = [];
  constructor(private script: Script) {}
  async connect(): Promise<Connection> {
    const c = new FakeConn(this.script);
    this.conns.push(c);
    return c;
  }
}

const ctl = (action: string, data: Record<string, unknown>) => ({ type: "control", payload: { action, data } });
const info = (state: string, uuid?: string) => ctl("session_info", { sessionId: "s1", state, ...(uuid ? { uuid } : {}) });
const ready = () => ctl("ready", { sessionId: "s1", region: "r1", model: "m1", promptUuids: true });

test("an earlier turn's error does not end the next prompt, which ends at its own result", async () => {
  const uuids: string[] = [];
  const t = new FakeTransport((c, m) => {
    if (m.type === "init") {
      c.emit(1, ready());
      c.emit(2, info("ready"));
    } else if (m.type === "user") {
      uuids.push(m.uuid as string);
      if (uuids.length === 1) {
        c.emit(3, info("processing", uuids[0]));
        c.emit(4, { type: "assistant", message: { content: [{ type: "text", text: "thinking" }] } });
      } else {
        // Prompt 2 is queued; turn 1 fails.
        c.emit(5, { type: "error", payload: { code: "internal", message: "the model failed", details: { uuid: uuids[0] } } });
        c.emit(6, info("ready", uuids[0]));
        c.emit(7, info("processing", uuids[1]));
        c.emit(8, { type: "result", subtype: "success", is_error: false, result: "two" });
        c.emit(9, info("ready", uuids[1]));
      }
    }
  });
  const s = await new Client("http://edge.invalid", "tok", { transport: t }).connect({ reconnect: false });
  try {
    for await (const m of s.prompt("one")) if (m.type === "assistant") break; // abandoned
    const seqs: number[] = [];
    for await (const m of s.prompt("two")) seqs.push((m as ServerMessage).seq ?? 0);
    assert.deepEqual(seqs, [5, 6, 7, 8]);
    assert.equal(uuids.length, 2);
    assert.ok(uuids[0] && uuids[1] && uuids[0] !== uuids[1], `fresh uuids: ${uuids.join(", ")}`);
  } finally {
    await s.close();
  }
});

test("a prompt whose turn had not started is sent again with its uuid after a reconnect", async () => {
  const got: { conn: number; uuid: string }[] = [];
  let seq = 0;
  const t = new FakeTransport((c, m) => {
    const n = t.conns.indexOf(c);
    if (m.type === "init") {
      c.emit(++seq, ready());
      c.emit(++seq, info("ready"));
    } else if (m.type === "user") {
      got.push({ conn: n, uuid: m.uuid as string });
      if (n === 1) {
        c.emit(++seq, info("processing", m.uuid as string));
        c.emit(++seq, { type: "result", subtype: "success", is_error: false, result: "done" });
      }
    }
  });
  const s = await new Client("http://edge.invalid", "tok", { transport: t }).connect({ reconnect: { minBackoffMs: 1 } });
  try {
    const turn = (async () => {
      const types: string[] = [];
      for await (const m of s.prompt("queued")) types.push(m.type);
      return types;
    })();
    while (got.length === 0) await new Promise((r) => setTimeout(r, 1));
    s.dropConnection(); // the prompt arrived; its turn had not started
    const types = await turn;
    assert.equal(types[types.length - 1], "result");
    assert.equal(got.length, 2, JSON.stringify(got));
    assert.equal(got[1]!.conn, 1);
    assert.equal(got[1]!.uuid, got[0]!.uuid);
  } finally {
    await s.close();
  }
});
