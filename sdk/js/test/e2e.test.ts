// End-to-end tests against a real Warren dev stack (the real Claude Code CLI in real sandboxes, a scripted
// model). internal/devstack's TestTypeScriptSDK starts the stack and runs these with its URL and the dev
// issuer's secret in the environment; every token here is minted by this SDK, so every test also proves
// that the edge verifies the SDK's tokens.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Client,
  type ServerMessage,
  Session,
  SessionClosedError,
  ToolServer,
  WarrenError,
  isResult,
  readyData,
  sessionState,
  textOf,
  toolCall,
} from "../src/index.js";
import { mintToken } from "../src/token.js";

function env(name: string): string {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: these tests run from Go against a dev stack: go test ./internal/devstack -run TestTypeScriptSDK (make test)`);
  }
  return v;
}

const url = env("WARREN_URL");
const issuer = env("WARREN_ISSUER");
const secret = env("WARREN_SECRET");
const kid = env("WARREN_KID");
const edge2 = env("WARREN_EDGE2"); // a second edge of the region

function client(user: string): Client {
  const token = mintToken(secret, { iss: issuer, sub: user, budget: { ai: 5_000_000, compute: 3600, window: "lifetime" } }, { kid });
  return new Client(url, token);
}

// Reads s until the turn's result; every message is passed to each.
async function untilResult(s: Session, each?: (m: ServerMessage) => void): Promise<ServerMessage[]> {
  const out: ServerMessage[] = [];
  for await (const m of s) {
    out.push(m);
    each?.(m);
    if (m.type === "error") throw new Error(`error message: ${JSON.stringify(m)}`);
    if (isResult(m)) return out;
  }
  throw new Error(`the session ended after ${out.length} messages without a result`);
}

// brief names a message for an assertion's explanation: its seq, type and subtype or state; a result's text.
function brief(m: ServerMessage): string {
  const r = m as { subtype?: string; is_error?: boolean; result?: unknown };
  const st = sessionState(m);
  let s = `${m.seq ?? "-"}:${m.type}${st ? ":" + st : r.subtype ? ":" + r.subtype : ""}`;
  if (isResult(m)) s += `(is_error=${r.is_error} ${JSON.stringify(String(r.result ?? "")).slice(0, 120)})`;
  return s;
}

function assertIncreasing(msgs: ServerMessage[], after = 0): void {
  let last = after;
  for (const m of msgs) {
    if (m.seq === undefined) continue;
    assert.ok(m.seq > last, `seq ${m.seq} after ${last}: lost or duplicated order in ${msgs.map((x) => x.seq).join(",")}`);
    last = m.seq;
  }
}

test("the issuer secret is a text secret", () => {
  assert.match(secret, /^wsk_[A-Za-z0-9]{43,}$/);
});

test("a turn streams assistant, stream_event and a result with Warren's cost", async () => {
  const s = await client("js-turn").connect({ options: { includePartialMessages: true } });
  try {
    assert.ok(s.id);
    assert.match(s.notice, /scripted/);
    const msgs: ServerMessage[] = [];
    for await (const m of s.prompt("hello there")) msgs.push(m);
    assert.ok(readyData(msgs[0]!) || sessionState(msgs[0]!), "the handshake comes first");
    assert.ok(msgs.some((m) => m.type === "system"));
    assert.ok(msgs.some((m) => m.type === "stream_event"), "no stream_event with includePartialMessages");
    const a = msgs.find((m) => m.type === "assistant");
    assert.ok(a && textOf(a).includes("You said: hello there"), `assistant: ${JSON.stringify(a)}`);
    const r = msgs.at(-1)!;
    assert.ok(isResult(r));
    assert.equal(r.is_error, false);
    assert.ok(r.cost && r.cost.ai_microdollars > 0, `cost: ${JSON.stringify(r.cost)}`);
    assert.equal(r.total_cost_usd, r.cost.ai_microdollars / 1e6);
    assertIncreasing(msgs);
  } finally {
    await s.close();
  }
});

test("one-shot query yields the turn and closes the session", async () => {
  const msgs: ServerMessage[] = [];
  for await (const m of client("js-query").query("one shot")) msgs.push(m);
  const r = msgs.at(-1)!;
  assert.ok(isResult(r) && r.result?.includes("one shot"), JSON.stringify(r));
});

test("a dropped connection reconnects with lastSeq: nothing lost or duplicated", async () => {
  const c = client("js-resume");
  // Runs a command's turn on s, drops the connection at the first assistant message and checks that the
  // stream goes on after one reconnect with every message once and in order, the command's output included.
  const dropMidTurn = async (s: Session, output: string) => {
    const handshake = s.lastSeq;
    await s.send(`run sleep 1; echo ${output}`);
    let dropped = false;
    const msgs = await untilResult(s, (m) => {
      if (!dropped && m.type === "assistant") {
        dropped = true;
        s.dropConnection();
      }
    });
    assert.ok(dropped);
    assert.equal(s.reconnects, 1);
    assertIncreasing(msgs, handshake);
    assert.ok(msgs.some((m) => m.type === "user" && JSON.stringify(m).includes(output)), "the command's output was lost");
    assert.equal(msgs.filter(isResult).length, 1);
  };

  // Automatic: the SDK resumes the turn on a new connection.
  const a = await c.connect({ reconnect: { minBackoffMs: 10 } });
  try {
    await dropMidTurn(a, "resumed-output");
  } finally {
    await a.close();
  }

  // Through another edge: the next of the list is tried first.
  const e = await c.connect({ reconnect: { minBackoffMs: 10, edges: [edge2] } });
  try {
    assert.equal(e.edge, c.url);
    await dropMidTurn(e, "other-edge-output");
    assert.equal(e.edge, edge2);
  } finally {
    await e.close();
  }

  // By hand: without reconnect the loss is a typed error; resume(id, lastSeq) picks the stream up.
  const b = await c.connect({ reconnect: false });
  await b.send("run sleep 1; echo manual-output");
  const before: ServerMessage[] = [];
  await assert.rejects(
    (async () => {
      for await (const m of b) {
        before.push(m);
        if (m.type === "assistant") b.dropConnection();
      }
    })(),
    (e: unknown) => e instanceof WarrenError && e.code === "unavailable" && e.closeCode === 1006,
  );
  const r = await c.resume(b.id, b.lastSeq, { reconnect: false });
  try {
    const after = await untilResult(r);
    assertIncreasing([...before, ...after]);
    assert.ok(after.some((m) => JSON.stringify(m).includes("manual-output")));
  } finally {
    await r.close();
  }
});

test("interrupt ends the running turn and the session goes on", async () => {
  const s = await client("js-interrupt").connect();
  try {
    let interrupted = false;
    const msgs: ServerMessage[] = [];
    // A command that blocks until interrupted (the CLI refuses a plain `sleep 120` before running it, so
    // that turn raced the interrupt to its end): the interrupt lands while the tool runs.
    for await (const m of s.prompt("run timeout 120 tail -f /dev/null")) {
      msgs.push(m);
      if (!interrupted && m.type === "assistant") {
        interrupted = true;
        await s.interrupt();
      }
    }
    assert.ok(interrupted);
    const end = msgs.at(-1)!;
    assert.ok(isResult(end) || sessionState(end) === "ready", `turn ended with ${JSON.stringify(end)}`);
    const next: ServerMessage[] = [];
    for await (const m of s.prompt("still here")) next.push(m);
    const r = next.at(-1)!;
    assert.ok(
      isResult(r) && !r.is_error && next.some((m) => m.type === "assistant"),
      `after the interrupt: ${next.map(brief).join(" ")}; the interrupted turn: ${msgs.map(brief).join(" ")}`,
    );
  } finally {
    await s.close();
  }
});

test("a client tool is answered by its handler", async () => {
  const calls: unknown[] = [];
  const app = new ToolServer("app", [
    {
      name: "lookup",
      description: "Looks a word up",
      inputSchema: { type: "object", properties: { q: { type: "string" } }, required: ["q"] },
      handler: (input) => {
        calls.push(input.q);
        return `JS-TOOL-ANSWER:${String(input.q)}`;
      },
    },
  ]);
  const s = await client("js-tools").connect({ tools: [app] });
  try {
    const msgs: ServerMessage[] = [];
    for await (const m of s.prompt('call mcp__app__lookup {"q":"alpha"}')) msgs.push(m);
    assert.deepEqual(calls, ["alpha"]);
    const call = msgs.map(toolCall).find((c) => c);
    // Named as declared, with its server (docs/PROTOCOL.md#host-tools).
    assert.deepEqual([call?.toolName, call?.serverName, call?.qualifiedName], ["lookup", "app", "mcp__app__lookup"]);
    assert.ok(msgs.some((m) => sessionState(m) === "waiting_tool"));
    // The CLI's user event carries the handler's answer as the tool's result.
    assert.ok(msgs.some((m) => m.type === "user" && JSON.stringify(m).includes("JS-TOOL-ANSWER:alpha")), "the answer did not reach the agent");
    const r = msgs.at(-1)!;
    assert.ok(isResult(r) && !r.is_error);
  } finally {
    await s.close();
  }
});

test("a client tool blocked by its declared name is not the agent's, and a bare-name client answers", async () => {
  const ran: string[] = [];
  const app = new ToolServer("app", [
    { name: "lookup", handler: () => (ran.push("lookup"), "JS-DECLARED-ANSWER") },
    { name: "secret", handler: () => (ran.push("secret"), "LEAKED") },
  ]);
  // disallowedTools names the tool as declared; the session refuses a name that is no tool at all.
  const c = client("js-declared");
  await assert.rejects(c.connect({ tools: [app], options: { disallowedTools: ["secrett"] } }), (e: unknown) => e instanceof WarrenError && e.code === "invalid_argument" && e.message.includes("secrett"));
  const s = await c.connect({ tools: [app], options: { disallowedTools: ["secret"] } });
  try {
    const blocked: ServerMessage[] = [];
    for await (const m of s.prompt("call mcp__app__secret {}")) blocked.push(m);
    const init = blocked.find((m) => m.type === "system" && (m as { subtype?: string }).subtype === "init") as { tools?: string[] } | undefined;
    assert.ok(init?.tools?.includes("mcp__app__lookup") && !init.tools.includes("mcp__app__secret"), `the agent's tools: ${JSON.stringify(init?.tools)}`);
    assert.equal(blocked.map(toolCall).find((c) => c), undefined, "the blocked tool reached the client");
    assert.ok(isResult(blocked.at(-1)!));

    // A client keyed by the declared name, as Chucky's SDK is: its handler answers by toolName alone.
    const msgs: ServerMessage[] = [];
    for await (const m of s.prompt("call mcp__app__lookup {}")) msgs.push(m);
    const call = msgs.map(toolCall).find((c) => c);
    assert.equal(call?.toolName, "lookup");
    assert.deepEqual(ran, ["lookup"]);
    assert.ok(msgs.some((m) => m.type === "user" && JSON.stringify(m).includes("JS-DECLARED-ANSWER")), "the answer did not reach the agent");
  } finally {
    await s.close();
  }
});

test("fork and continue open new sessions from a transcript", async () => {
  const c = client("js-fork");
  const s = await c.connect();
  for await (const m of s.prompt("remember the word kiwi")) void m;
  await s.close();
  const f = await c.fork(s.id);
  try {
    assert.ok(f.id && f.id !== s.id, `fork id ${f.id}`);
    for await (const m of f.prompt("and in the fork")) void m;
  } finally {
    await f.close();
  }
  const k = await c.continue();
  try {
    assert.ok(k.id);
  } finally {
    await k.close();
  }
});

test("close stops the session cleanly: the stream ends, sends fail typed", async (t) => {
  const s = await client("js-close").connect();
  // A figure, not an assertion: the ping round trip through the edge to the runner and back.
  const rtts: number[] = [];
  for (let i = 0; i < 200; i++) rtts.push(await s.ping());
  rtts.sort((a, b) => a - b);
  t.diagnostic(`ping RTT over WebSocket through the edge, 200 pings: p50 ${rtts[100]!.toFixed(2)} ms, p99 ${rtts[198]!.toFixed(2)} ms`);
  await s.close();
  await s.close(); // again: nothing
  for await (const m of s) void m; // drains what was queued, then ends without an error
  assert.equal(s.error, undefined);
  await assert.rejects(s.send("late"), SessionClosedError);
});

test("exec, streamed exec and files with the same token", async () => {
  const sb = client("js-sandbox").sandbox;
  const res = await sb.exec({ command: "echo hi > f && cat f" });
  assert.equal(res.stdout, "hi\n");
  assert.equal(res.exitCode, 0);
  const evs = [];
  for await (const ev of sb.execStream({ command: "echo one; echo two >&2; exit 3" })) evs.push(ev);
  assert.deepEqual(evs.filter((e) => e.type !== "exit").map((e) => ("data" in e ? e.type + ":" + e.data : "")).sort(), ["stderr:two\n", "stdout:one\n"]);
  const exit = evs.at(-1)!;
  assert.ok(exit.type === "exit" && exit.result.exitCode === 3);
  assert.deepEqual(await sb.writeFile("dir/a.txt", "content"), { path: "dir/a.txt", size: 7 });
  assert.equal(await sb.readText("dir/a.txt"), "content");
  assert.deepEqual((await sb.list("dir")).map((e) => e.name), ["a.txt"]);
  await assert.rejects(sb.remove("dir"), (e: unknown) => e instanceof WarrenError && e.code === "conflict" && e.status === 409);
  await sb.remove("dir", { recursive: true });
  await assert.rejects(sb.readFile("dir/a.txt"), (e: unknown) => e instanceof WarrenError && e.code === "not_found");
  await assert.rejects(sb.readFile("../etc/passwd"), (e: unknown) => e instanceof WarrenError && e.code === "permission_denied");
});

// Reads a terminal's output until it contains want (after from); returns the text read so far.
async function readUntil(it: AsyncIterator<Uint8Array>, seen: { text: string }, want: string): Promise<void> {
  const dec = new TextDecoder();
  while (!seen.text.includes(want)) {
    const { value, done } = await it.next();
    if (done) throw new Error(`the terminal ended without ${JSON.stringify(want)}: ${JSON.stringify(seen.text)}`);
    seen.text += dec.decode(value, { stream: true });
  }
}

test("a terminal: typed input, resize, Ctrl-C, detach and re-attach with replay, exit code", async () => {
  const terms = client("js-terminal").terminals;
  const info = await terms.create({ command: "sh", args: ["-i"], cols: 80, rows: 24, env: { PS1: "$ " } });
  assert.equal(info.status, "running");
  let conn = await terms.attach(info.id);
  let it = conn[Symbol.asyncIterator]();
  let seen = { text: "" };
  conn.write("echo h''i-js\n"); // the quotes keep the terminal's echo of the line from matching
  await readUntil(it, seen, "hi-js");
  conn.resize(120, 40);
  conn.write("stty size\n");
  await readUntil(it, seen, "40 120");
  conn.write("sh -c 'echo sle\"\"eping; exec sleep 100'\n");
  await readUntil(it, seen, "sleeping");
  conn.write("\x03"); // Ctrl-C: without it the next line would wait 100 s
  conn.write("echo ali''ve\n");
  await readUntil(it, seen, "alive");
  conn.close();
  assert.deepEqual(await conn.ended, {});
  assert.equal((await terms.get(info.id)).status, "running");

  conn = await terms.attach(info.id); // the kept output comes first
  it = conn[Symbol.asyncIterator]();
  seen = { text: "" };
  await readUntil(it, seen, "hi-js");
  await readUntil(it, seen, "alive");
  conn.write("exit 6\n");
  for (;;) if ((await it.next()).done) break;
  assert.deepEqual(await conn.ended, { exitCode: 6 });
  assert.equal((await terms.list()).find((t) => t.id === info.id)?.exitCode, 6);
  await terms.kill(info.id);
  await assert.rejects(terms.attach(info.id), (e: unknown) => e instanceof WarrenError && e.code === "not_found");
  await assert.rejects(terms.create({ cols: 5000, rows: 1 }), (e: unknown) => e instanceof WarrenError && e.code === "invalid_argument");
});

test("a bad token is a typed unauthenticated error on the channel and over REST", async () => {
  const forged = mintToken("wsk_" + "x".repeat(43), { iss: issuer, sub: "js-bad" }, { kid });
  const c = new Client(url, forged);
  await assert.rejects(c.connect(), (e: unknown) => e instanceof WarrenError && e.code === "unauthenticated" && e.closeCode === 4401);
  await assert.rejects(c.sandbox.exec({ command: "true" }), (e: unknown) => e instanceof WarrenError && e.code === "unauthenticated" && e.status === 401);
  const expired = mintToken(secret, { iss: issuer, sub: "js-bad", exp: Math.floor(Date.now() / 1000) - 3600 }, { kid });
  await assert.rejects(new Client(url, expired).connect(), (e: unknown) => e instanceof WarrenError && e.code === "unauthenticated");
});

test("regions: the edge lists its region, and nearest picks it", async () => {
  const c = client("js-regions");
  const r = await c.regions();
  assert.ok(r.regions.some((g) => g.name === r.region));
  const { client: near, probes } = await Client.nearest(url, c.token, { probes: 2 });
  assert.equal(probes.length, r.regions.length);
  assert.ok(near.url);
  const s = await near.connect();
  await s.close();
});

test("files: mkdir -p, stat, move, ranged reads and a recursive watch that sees what exec does", async () => {
  const sb = client("js-files").sandbox;
  await sb.mkdir("w");
  const ac = new AbortController();
  const events = sb.watch("w", { debounceMs: 20, signal: ac.signal });
  const first = await events.next();
  assert.ok(!first.done && first.value.type === "ready" && first.value.ready.path === "w" && first.value.ready.recursive);
  const seen = new Map<string, string[]>();
  const until = async (done: () => boolean): Promise<void> => {
    while (!done()) {
      const { value, done: end } = await events.next();
      assert.ok(!end, `the watch ended; seen ${JSON.stringify([...seen])}`);
      assert.notEqual(value.type, "overflow");
      if (value.type === "change") seen.set(value.change.path, [...(seen.get(value.change.path) ?? []), ...value.change.ops]);
    }
  };
  const dir = await sb.mkdir("w/a/b", { parents: true });
  assert.equal(dir.type, "dir");
  assert.equal((await sb.mkdir("w/a/b", { parents: true })).path, "w/a/b");
  await assert.rejects(sb.mkdir("w/a"), (e: unknown) => e instanceof WarrenError && e.code === "conflict");
  const res = await sb.exec({ command: "cd w && mkdir -p new/deep && echo hi > new/deep/f.txt && echo x > t.txt && mv t.txt u.txt" });
  assert.equal(res.exitCode, 0, res.stderr);
  await until(() => (seen.get("w/new/deep/f.txt") ?? []).includes("create") && (seen.get("w/u.txt") ?? []).includes("create"));
  assert.ok((seen.get("w/t.txt") ?? []).includes("rename"));
  const st = await sb.stat("w/new/deep/f.txt");
  assert.equal(st.type, "file");
  assert.equal(st.size, 3);
  const moved = await sb.move("w/u.txt", "w/a/b/v.txt");
  assert.equal(moved.path, "w/a/b/v.txt");
  await assert.rejects(sb.move("w/new/deep/f.txt", "w/a/b/v.txt"), (e: unknown) => e instanceof WarrenError && e.code === "conflict");
  await until(() => (seen.get("w/a/b/v.txt") ?? []).includes("create"));
  await sb.writeFile("w/r.txt", "0123456789");
  assert.equal(await new Response(await sb.readRange("w/r.txt", 3, 4)).text(), "3456");
  assert.equal(await new Response(await sb.readRange("w/r.txt", 7)).text(), "789");
  for (const p of ["../x", "/etc", "w/../../x"]) {
    await assert.rejects(sb.stat(p), (e: unknown) => e instanceof WarrenError && e.code === "permission_denied");
    await assert.rejects(sb.mkdir(p + "/d", { parents: true }), (e: unknown) => e instanceof WarrenError && e.code === "permission_denied");
    await assert.rejects(sb.move("w/r.txt", p), (e: unknown) => e instanceof WarrenError && e.code === "permission_denied");
    await assert.rejects(sb.watch(p).next(), (e: unknown) => e instanceof WarrenError && e.code === "permission_denied");
  }
  await sb.remove("w", { recursive: true });
  await until(() => (seen.get("w") ?? []).includes("remove"));
  ac.abort();
});

test("preview URLs: a server of the sandbox through the edge, private and public, listed and revoked", async () => {
  const c = client("js-preview");
  const port = 18797;
  // A server in the sandbox, as a background process (the process API over the client's request).
  const started = await c.request("POST", "/v1/sandbox/procs", {
    body: JSON.stringify({ command: "python3", args: ["-m", "http.server", String(port)] }),
    headers: { "Content-Type": "application/json" },
  });
  const proc = (await started.json()) as { id: string };
  await c.request("POST", `/v1/sandbox/procs/${proc.id}/wait`, {
    body: JSON.stringify({ for: "port", port }),
    headers: { "Content-Type": "application/json" },
  });
  const priv = await c.sandbox.createPreview({ port });
  const pub = await c.sandbox.createPreview({ port, public: true, ttl_seconds: 600 });
  assert.equal(priv.public, false);
  assert.ok(priv.token.startsWith(`${port}-${priv.id}-`), priv.token);
  assert.ok(priv.url.endsWith(`/preview/${priv.token}/`), priv.url);
  assert.equal(Date.parse(pub.expires) - Date.parse(pub.created), 600_000);

  const listing = await fetch(pub.url);
  assert.equal(listing.status, 200);
  assert.match(await listing.text(), /Directory listing/);
  const refused = await fetch(priv.url);
  assert.equal(refused.status, 401);
  assert.equal(((await refused.json()) as { code: string }).code, "unauthenticated");
  const owner = await fetch(priv.url, { headers: { Authorization: `Bearer ${c.token}` } });
  assert.equal(owner.status, 200);
  await owner.body?.cancel();
  const other = await fetch(priv.url, { headers: { Authorization: `Bearer ${client("js-preview-other").token}` } });
  assert.equal(other.status, 403);
  await other.body?.cancel();

  assert.deepEqual((await c.sandbox.previews()).map((p) => p.id), [priv.id, pub.id]);
  await c.sandbox.revokePreview(priv.id);
  assert.deepEqual((await c.sandbox.previews()).map((p) => p.id), [pub.id]);
  const gone = await fetch(priv.url, { headers: { Authorization: `Bearer ${c.token}` } });
  assert.equal(gone.status, 404);
  await gone.body?.cancel();
  await assert.rejects(c.sandbox.revokePreview(priv.id), (e: unknown) => e instanceof WarrenError && e.code === "not_found");
  await assert.rejects(c.sandbox.createPreview({ port: 0 }), (e: unknown) => e instanceof WarrenError && e.code === "invalid_argument");
});

test("me() reports the budget and the sandbox's state without starting it", async () => {
  const c = client("js-me");
  const before = await c.me();
  assert.equal(before.iss, issuer);
  assert.equal(before.sub, "js-me");
  assert.equal(before.budget.window, "lifetime");
  assert.equal(before.budget.resetsAt, undefined);
  assert.deepEqual(before.budget.compute, { limit: 3600, used: 0, remaining: 3600 });
  assert.deepEqual(before.budget.ai, { limit: 5_000_000, used: 0, remaining: 5_000_000 });
  assert.equal(before.sandbox.state, "absent");
  assert.equal((await c.me()).sandbox.state, "absent", "me() must not start the sandbox");
  await c.sandbox.exec({ command: "true" });
  const after = await c.me();
  assert.equal(after.sandbox.state, "running");
  assert.equal(after.sandbox.region, after.region);
  assert.ok((after.sandbox.epoch ?? 0) >= 1);
  const bad = new Client(url, "not-a-token");
  await assert.rejects(bad.me(), (e: unknown) => e instanceof WarrenError && e.code === "unauthenticated" && e.status === 401);
});
