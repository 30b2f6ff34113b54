// The SDK's browser build in headless Chromium (Debian's package): a page on another loopback origin loads
// dist/src as ES modules, with no bundler and no ws, opens a session over the browser's own WebSocket
// and then over WebTransport (CONNECT /wt, the dev certificate pinned by the hash /v1/regions publishes;
// token in ?token=), runs a turn on each, and meets a bad token as a typed error with its close code (4401),
// 20 times, on each; AutoTransport picks WebTransport (also when it reads /v1/regions itself, across
// origins), and the WebSocket when WebTransport does not connect; the sandbox API answers across origins
// (the edge's CORS). Driven over the DevTools
// protocol with the ws package. Run by internal/devstack's TestTypeScriptSDK with WARREN_CHROMIUM set.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { mintToken } from "../src/token.js";
import { CDP, launch, runPage, serve, stop } from "./chromium.js";

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run go test ./internal/devstack -run TestTypeScriptSDK (make tools installs chromium)`);
  return v;
}

const page = `<!doctype html><meta charset="utf-8"><title>warren sdk</title>
<script type="module">
import { AutoTransport, Client, isResult, WarrenError, WebTransportTransport, hasWebTransport } from "/sdk/index.js";
const p = new URLSearchParams(location.search);
async function run(transport) {
  const c = new Client(p.get("url"), p.get("token"), { transport });
  const s = await c.connect({ options: { includePartialMessages: true } });
  const msgs = [];
  for await (const m of s.prompt("hello from the browser")) msgs.push(m);
  const rtts = [];
  for (let i = 0; i < 100; i++) rtts.push(await s.ping());
  rtts.sort((a, b) => a - b);
  const rtt = { p50: rtts[50], p99: rtts[98] };
  await s.close();
  let bad;
  try { await new Client(p.get("url"), p.get("bad"), { transport }).connect(); } catch (e) {
    bad = { warren: e instanceof WarrenError, code: e.code, closeCode: e.closeCode };
  }
  // Refused again and again: the close code must arrive every time.
  const closeCodes = [];
  for (let i = 0; i < 20; i++) {
    try { await new Client(p.get("url"), p.get("bad"), { transport }).connect(); closeCodes.push("connected"); } catch (e) {
      closeCodes.push(e.code + ":" + e.closeCode);
    }
  }
  const r = msgs.at(-1);
  return { types: msgs.map((m) => m.type), result: isResult(r) ? r.result : null, cost: r.cost, rtt, bad, closeCodes };
}
// The browser's own WebTransport, refused 20 times: how often Chromium reports the session's code itself
// (without the SDK's reading of the error before it; docs/PROTOCOL.md#webtransport). A figure.
async function rawRefusals(ep) {
  const hashes = ep.certificateHashes.map((h) => ({ algorithm: "sha-256", value: Uint8Array.from(atob(h.value), (c) => c.charCodeAt(0)) }));
  const seen = {};
  for (let i = 0; i < 20; i++) {
    const t = new WebTransport(ep.url + "?token=" + encodeURIComponent(p.get("bad")), { serverCertificateHashes: hashes });
    await t.ready;
    const s = await t.createBidirectionalStream();
    const w = s.writable.getWriter();
    const body = new TextEncoder().encode(JSON.stringify({ type: "init", payload: {} }));
    const f = new Uint8Array(4 + body.length);
    new DataView(f.buffer).setUint32(0, body.length);
    f.set(body, 4);
    await w.write(f);
    const r = s.readable.getReader();
    while (!(await r.read()).done);
    await w.close().catch(() => {});
    const k = await t.closed.then((c) => String(c.closeCode), () => "lost");
    seen[k] = (seen[k] ?? 0) + 1;
  }
  return seen;
}
// The edge's HTTP API from this page's origin (another one): CORS (dev default: any origin).
async function cors() {
  const c = new Client(p.get("url"), p.get("token"));
  const { region, regions } = await c.regions();
  const exec = await c.sandbox.exec({ command: "echo cors-ok" });
  const files = await c.sandbox.list(".");
  return { region, regions: regions.length, stdout: exec.stdout, exitCode: exec.exitCode, files: Array.isArray(files) };
}
// AutoTransport: WebTransport when it connects; the WebSocket when it does not (a port nothing listens on).
async function auto(endpoint) {
  const t = new AutoTransport(endpoint, { timeoutMs: 2000 });
  const s = await new Client(p.get("url"), p.get("token"), { transport: t }).connect();
  await s.ping();
  await s.close();
  return t.last;
}
const wt = JSON.parse(p.get("wt"));
window.__result = (async () => ({
  hasProcess: typeof process !== "undefined",
  hasWebTransport: hasWebTransport(),
  websocket: await run(undefined),
  webtransport: await run(new WebTransportTransport(wt)),
  auto: await auto(wt),
  autoFallback: await auto({ ...wt, url: "https://127.0.0.1:9/wt" }),
  // No endpoint given: the transport reads /v1/regions itself, across origins.
  autoDiscovered: await auto(undefined),
  cors: await cors(),
  rawRefusals: await rawRefusals(wt),
}))().catch((e) => ({ error: String(e), code: e.code, closeCode: e.closeCode, stack: e.stack }));
</script>`;

test("the browser build runs a session over the browser's WebSocket and over WebTransport, with typed errors", async (ctx) => {
  const chromium = env("WARREN_CHROMIUM");
  const url = env("WARREN_URL");
  const claims = { iss: env("WARREN_ISSUER"), sub: "js-browser", budget: { ai: 5_000_000, compute: 3600, window: "lifetime" as const } };
  const token = mintToken(env("WARREN_SECRET"), claims, { kid: env("WARREN_KID") });
  const bad = mintToken("wsk_" + "x".repeat(43), claims, { kid: env("WARREN_KID") });
  const site = await serve(page);
  const dir = mkdtempSync(join(tmpdir(), "warren-chromium-"));
  const { proc, ws } = await launch(chromium, dir);
  try {
    const cdp = new CDP(ws);
    // The edge's WebTransport endpoint and its dev certificate's hash, as GET /v1/regions publishes them
    // (the page reads that answer itself too, across origins: autoDiscovered).
    const regions = (await (await fetch(`${url}/v1/regions`, { headers: { Authorization: `Bearer ${token}` } })).json()) as {
      region: string;
      regions: { name: string; webtransport?: string; certificateHashes?: unknown[] }[];
    };
    const mine = regions.regions.find((g) => g.name === regions.region);
    assert.ok(mine?.webtransport && mine.certificateHashes?.length, `regions: ${JSON.stringify(regions)}`);
    const wt = JSON.stringify({ url: mine.webtransport, certificateHashes: mine.certificateHashes });
    const q = new URLSearchParams({ url, token, bad, wt });
    const out = await runPage(cdp, `${site.url}/?${q}`);
    assert.ok(!out.error, `in the browser: ${JSON.stringify(out)}\nconsole:\n${cdp.console.join("\n")}`);
    assert.equal(out.hasProcess, false, "not a browser context");
    assert.equal(out.hasWebTransport, true);
    assert.equal(out.auto, "webtransport");
    assert.equal(out.autoFallback, "websocket");
    assert.equal(out.autoDiscovered, "webtransport");
    ctx.diagnostic(`the browser's own WebTransport, 20 refused sessions: close codes ${JSON.stringify(out.rawRefusals)}`);
    assert.deepEqual(out.cors, { region: "local", regions: 1, stdout: "cors-ok\n", exitCode: 0, files: true }, JSON.stringify(out.cors));
    for (const name of ["websocket", "webtransport"]) {
      const t = out[name];
      assert.ok(t.types.includes("assistant") && t.types.includes("stream_event"), `${name}: ${JSON.stringify(t.types)}`);
      assert.equal(t.types.at(-1), "result", name);
      assert.match(t.result, /hello from the browser/, name);
      assert.ok(t.cost.ai_microdollars > 0, name);
      assert.ok(t.rtt.p50 >= 0, name);
      // A figure, not an assertion.
      ctx.diagnostic(`browser ping RTT over ${name}, 100 pings: p50 ${t.rtt.p50.toFixed(2)} ms, p99 ${t.rtt.p99.toFixed(2)} ms`);
      // The refusal's code and its close code, every time (over WebTransport too: docs/PROTOCOL.md#webtransport).
      assert.deepEqual(t.bad, { warren: true, code: "unauthenticated", closeCode: 4401 }, name);
      assert.deepEqual(t.closeCodes, Array(20).fill("unauthenticated:4401"), name);
    }
  } finally {
    await stop(proc, ws);
    site.close();
    rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 }); // Chromium's helpers may still be writing there
  }
});
