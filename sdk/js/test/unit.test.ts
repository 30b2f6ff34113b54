// Tests of the SDK's parts that need no server: errors, message parsing, the SSE parser, tools, tokens.

import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { test } from "node:test";

import {
  SSEParser,
  ToolServer,
  WarrenError,
  closeCodeFor,
  codeForCloseCode,
  codeForHTTPStatus,
  codes,
  errorFromClose,
  errorFromHTTP,
  parseExecEvent,
  parseWatchEvent,
  parseRegions,
  parseServerMessage,
  parseTermControl,
  runTool,
  toolCall,
} from "../src/index.js";
import { mintToken } from "../src/token.js";

test("close codes and HTTP statuses map to codes and back", () => {
  for (const c of codes) assert.equal(codeForCloseCode(closeCodeFor(c)), c);
  assert.equal(codeForHTTPStatus(429), "rate_limited");
  assert.equal(codeForHTTPStatus(401), "unauthenticated");
  assert.equal(codeForHTTPStatus(502), "internal");
  assert.equal(codeForHTTPStatus(418), "invalid_argument");
});

test("a close carries its code: JSON reason, bare code, shortened reason completed by the error before it", () => {
  const e = errorFromClose(4401, '{"code":"unauthenticated","message":"token expired"}');
  assert.ok(e instanceof WarrenError);
  assert.equal(e.code, "unauthenticated");
  assert.equal(e.closeCode, 4401);
  assert.equal(e.message, "token expired");
  const prev = new WarrenError("budget_exceeded", "a long message that did not fit the close frame", { window: "day" });
  const short = errorFromClose(4402, "budget_exceeded", prev);
  assert.equal(short?.message, prev.message);
  assert.deepEqual(short?.details, { window: "day" });
  assert.equal(short?.closeCode, 4402);
  assert.equal(errorFromClose(1000, ""), undefined);
  assert.equal(errorFromClose(1006, "")?.code, "unavailable");
  assert.equal(errorFromClose(1009, "")?.code, "payload_too_large");
  assert.equal(errorFromClose(3999, "odd")?.code, "internal");
  // A hostile reason naming no code of ours is not taken as one.
  assert.equal(errorFromClose(4400, '{"code":"pwned","message":"x"}')?.code, "invalid_argument");
});

test("HTTP error bodies become typed errors; a body that is not ours keeps the status's code", () => {
  const e = errorFromHTTP(429, '{"code":"rate_limited","message":"slow down","details":{"retry_after_seconds":3}}');
  assert.equal(e.code, "rate_limited");
  assert.equal(e.status, 429);
  assert.equal(e.details?.retry_after_seconds, 3);
  const p = errorFromHTTP(502, "<html>bad gateway</html>");
  assert.equal(p.code, "internal");
  assert.equal(p.status, 502);
  assert.equal(errorFromHTTP(400, "x".repeat(1 << 20)).message.length < 300, true);
});

test("server messages: malformed frames are internal errors, new shapes get through, bad seqs are dropped", () => {
  for (const bad of ["", "[]", "null", '"x"', "{", '{"type":3}', "{}"]) {
    assert.throws(() => parseServerMessage(bad), (e: unknown) => e instanceof WarrenError && e.code === "internal", bad);
  }
  assert.equal(parseServerMessage('{"seq":7,"type":"new_thing","x":1}').type, "new_thing");
  assert.equal(parseServerMessage('{"seq":"7","type":"result"}').seq, undefined);
  assert.equal(parseServerMessage('{"seq":-1,"type":"result"}').seq, undefined);
  assert.equal(toolCall(parseServerMessage('{"type":"tool_call","payload":{"callId":1}}')), undefined);
  assert.deepEqual(toolCall(parseServerMessage('{"type":"tool_call","payload":{"callId":"c","toolName":"t","input":[1]}}'))?.input, {});
});

test("SSE parser: line endings, comments, multi-line data, chunking at every byte", () => {
  const stream = '\uFEFF: hi\r\nevent: stdout\r\ndata: {"data":"a"}\r\n\r\nevent:exit\ndata: {"exitCode":0,\ndata: "durationMs":1}\r\revent: x\n\n';
  const want = [
    { event: "stdout", data: '{"data":"a"}' },
    { event: "exit", data: '{"exitCode":0,\n"durationMs":1}' },
  ];
  assert.deepEqual(new SSEParser().push(stream), want);
  for (let cut = 0; cut <= stream.length; cut++) {
    const p = new SSEParser();
    assert.deepEqual([...p.push(stream.slice(0, cut)), ...p.push(stream.slice(cut))], want, `cut at ${cut}`);
  }
  assert.throws(() => new SSEParser(16).push("data: " + "x".repeat(32) + "\n"), (e: unknown) => e instanceof WarrenError);
  assert.throws(() => new SSEParser(16).push("x".repeat(32)), (e: unknown) => e instanceof WarrenError);
});

// FuzzSSEAndMessages (node's runner has no fuzzer): random bytes through every parser of untrusted input
// must give results or WarrenErrors, never anything else.
test("fuzz: parsers of server input throw only WarrenErrors", () => {
  const alphabet = ['{', '}', '"', ":", ",", "\n", "\r", " ", "data", "event", "exit", "error", "stdout", "code", "seq", "type", "1", "[", "]", "\uFEFF", "\u0000", "é"];
  for (let i = 0; i < 1000; i++) {
    const n = randomBytes(1)[0]! % 40;
    const s = Array.from(randomBytes(n), (b) => alphabet[b % alphabet.length]).join("");
    const ok = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        assert.ok(e instanceof WarrenError, `${JSON.stringify(s)}: ${String(e)}`);
      }
    };
    ok(() => new SSEParser(64).push(s));
    ok(() => parseServerMessage(s));
    ok(() => parseExecEvent("exit", s));
    ok(() => parseExecEvent("error", s));
    ok(() => parseRegions(s));
    ok(() => errorFromHTTP(400, s));
    ok(() => errorFromClose(4400, s));
  }
});

test("regions: entries without a usable URL are dropped, oversize answers refused", () => {
  const r = parseRegions(
    JSON.stringify({ region: "a", regions: [{ name: "a", url: "http://127.0.0.1:1", health: "ok", edges: 1 }, { name: "b", url: "javascript:x" }, { name: "", url: "http://x" }, 7] }),
  );
  assert.deepEqual(r.regions.map((g) => g.name), ["a"]);
  assert.throws(() => parseRegions(JSON.stringify({ regions: Array(300).fill({}) })), WarrenError);
});

test("tools: names validated, handler errors and oversize answers become error results", async () => {
  assert.throws(() => new ToolServer("bad name", []), WarrenError);
  const srv = new ToolServer("app", [
    { name: "ok", handler: (i) => `got ${String(i.q)}` },
    { name: "boom", handler: () => { throw new Error("no such customer"); } },
    { name: "big", handler: () => "x".repeat(2 << 20) },
  ]);
  // No type: the runner names the tools as declared in tool_call, with serverName and qualifiedName.
  assert.deepEqual(srv.mcpServer(), { name: "app", tools: [{ name: "ok" }, { name: "boom" }, { name: "big" }] });
  assert.equal(srv.lookup("mcp__app__ok")?.name, "ok");
  assert.equal(srv.lookup("mcp__other__ok"), undefined);
  // A call as a runner before declared names sends it, and as one that sends them; another server's tool
  // of the same name is not this server's.
  assert.equal(srv.lookup({ toolName: "mcp__app__ok" })?.name, "ok");
  assert.equal(srv.lookup({ toolName: "ok", serverName: "app", qualifiedName: "mcp__app__ok" })?.name, "ok");
  assert.equal(srv.lookup({ toolName: "ok", serverName: "other", qualifiedName: "mcp__other__ok" }), undefined);
  const wire = toolCall(parseServerMessage('{"type":"tool_call","payload":{"callId":"c","toolName":"ok","serverName":"app","qualifiedName":"mcp__app__ok","input":{}}}'));
  assert.equal(wire && srv.lookup(wire)?.name, "ok");
  assert.equal(toolCall(parseServerMessage('{"type":"tool_call","payload":{"callId":"c","toolName":"ok","qualifiedName":7,"input":{}}}'))?.qualifiedName, undefined);
  const call = { callId: "c", toolName: "mcp__app__ok" };
  assert.deepEqual(await runTool(srv.tools[0]!, { q: 1 }, call), { content: [{ type: "text", text: "got 1" }] });
  assert.deepEqual(await runTool(srv.tools[1]!, {}, call), { content: [{ type: "text", text: "no such customer" }], isError: true });
  assert.equal((await runTool(srv.tools[2]!, {}, call)).isError, true);
});

test("tokens: HS256 over the secret's UTF-8 bytes, as any JWT library signs; bad claims refused", () => {
  const secret = "wsk_" + "A1".repeat(22);
  const tok = mintToken(secret, { iss: "acme", sub: "u1", budget: { ai: 5, window: "lifetime" } }, { kid: "acme-v1" });
  const [h, p, sig] = tok.split(".");
  assert.deepEqual(JSON.parse(Buffer.from(h!, "base64url").toString()), { alg: "HS256", typ: "JWT", kid: "acme-v1" });
  const claims = JSON.parse(Buffer.from(p!, "base64url").toString());
  assert.equal(claims.iss, "acme");
  assert.ok(claims.exp > Date.now() / 1000);
  assert.equal(sig, createHmac("sha256", Buffer.from(secret)).update(`${h}.${p}`).digest("base64url"));
  assert.throws(() => mintToken("wsk_short", { iss: "a", sub: "b" }), WarrenError);
  assert.throws(() => mintToken(secret, { iss: "", sub: "b" }), WarrenError);
  assert.throws(() => mintToken(secret, { iss: "a", sub: "b\n" }), WarrenError);
  const withTemplate = mintToken(secret, { iss: "a", sub: "b", template: "py-3.12" });
  assert.equal(JSON.parse(Buffer.from(withTemplate.split(".")[1]!, "base64url").toString()).template, "py-3.12");
  for (const bad of ["", "Py", "../py", ".py", "p".repeat(65)]) {
    assert.throws(() => mintToken(secret, { iss: "a", sub: "b", template: bad }), WarrenError, `template ${JSON.stringify(bad)}`);
  }
  assert.throws(() => mintToken(secret, { iss: "a", sub: "b", sdkConfig: { systemPrompt: "x".repeat(9000) } }), (e: unknown) => e instanceof WarrenError && e.code === "payload_too_large");
});

test("watch events parse, unknown ones are skipped, malformed ones throw", () => {
  assert.deepEqual(parseWatchEvent("change", `{"path":"a/b","ops":["create","write"],"dir":true}`), {
    type: "change",
    change: { path: "a/b", ops: ["create", "write"], dir: true },
  });
  const ready = parseWatchEvent("ready", `{"path":".","recursive":true,"dirs":3,"debounceMs":50}`);
  assert.ok(ready?.type === "ready" && ready.ready.dirs === 3);
  const over = parseWatchEvent("overflow", `{"reason":"queue","dropped":7,"message":"m"}`);
  assert.ok(over?.type === "overflow" && over.overflow.dropped === 7);
  assert.equal(parseWatchEvent("future", "{}"), undefined);
  for (const [ev, data] of [["change", "{"], ["change", `{"path":"a"}`], ["change", `{"path":"a","ops":[1]}`], ["ready", "[]"], ["overflow", "{}"]]) {
    assert.throws(() => parseWatchEvent(ev, data), (e: unknown) => e instanceof WarrenError && e.code === "internal");
  }
});

test("terminal control messages are checked as the runner checks them", () => {
  assert.deepEqual(parseTermControl(`{"type":"resize","cols":80,"rows":24}`), { type: "resize", cols: 80, rows: 24 });
  assert.deepEqual(parseTermControl(`{"type":"exit","code":3}`), { type: "exit", code: 3 });
  for (const bad of [
    `{"type":"resize","cols":0,"rows":24}`,
    `{"type":"resize","cols":80,"rows":1001}`,
    `{"type":"resize","cols":80.5,"rows":24}`,
    `{"type":"resize","cols":80,"rows":24,"code":1}`,
    `{"type":"exit"}`,
    `{"type":"exit","code":1,"cols":2}`,
    `{"type":"signal"}`,
    `{"type":"exit","code":0,"extra":1}`,
    `[]`,
    `nope`,
  ]) {
    assert.throws(() => parseTermControl(bad), (e: unknown) => e instanceof WarrenError && e.code === "invalid_argument", bad);
  }
  assert.throws(() => parseTermControl(" ".repeat(1025)), (e: unknown) => e instanceof WarrenError && e.code === "payload_too_large");
});
