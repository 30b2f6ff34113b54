// The browser side of internal/devstack's BenchmarkBrowserAgentChannel: in headless Chromium, a page on
// another loopback origin loads the SDK's browser build and measures, over the browser's own WebSocket and
// over WebTransport through the edge, what BenchmarkAgentChannel measures from Go:
//
//   - ping: JSON ping → pong round trips on one session;
//   - connect: a fresh session from connect to its first event (ready), then closed;
//   - events: turns of the prompt given (the scripted model's "long" scenario with includePartialMessages,
//     the Go benchmark's script): every message counted, over the time the turns took.
//
// Prints one JSON object on stdout: per transport, the round trips and connect times in milliseconds
// (performance.now(), which Chromium coarsens to 0.1 ms for a page that is not cross-origin isolated) and
// the events and busy time of the turns. Run by the Go benchmark with the variables below set.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { CDP, launch, runPage, serve, stop } from "../test/chromium.js";

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run go test ./internal/devstack -run '^$' -bench BrowserAgentChannel`);
  return v;
}

const page = `<!doctype html><meta charset="utf-8"><title>warren sdk bench</title>
<script type="module">
import { Client, WebTransportTransport } from "/sdk/index.js";
const p = new URLSearchParams(location.search);
const n = JSON.parse(p.get("n"));
async function measure(transport) {
  const c = new Client(p.get("url"), p.get("token"), { transport });
  const s = await c.connect();
  const ping = [];
  for (let i = 0; i < n.pings; i++) ping.push(await s.ping());
  await s.close();
  const connect = [];
  for (let i = 0; i < n.connects; i++) {
    const start = performance.now();
    const f = await c.connect();
    connect.push(performance.now() - start);
    await f.close();
  }
  const t = await c.connect({ options: { includePartialMessages: true } });
  let events = 0, busyMs = 0, last;
  for (let i = 0; i < n.turns; i++) {
    const start = performance.now();
    for await (const m of t.prompt(p.get("prompt"))) { events++; last = m; }
    busyMs += performance.now() - start;
  }
  await t.close();
  if (n.turns > 0 && last?.type !== "result") throw new Error("a turn ended with " + JSON.stringify(last));
  return { ping, connect, events, busyMs };
}
window.__result = (async () => ({
  websocket: await measure(undefined),
  webtransport: await measure(new WebTransportTransport(JSON.parse(p.get("wt")))),
}))().catch((e) => ({ error: String(e), code: e.code, stack: e.stack }));
</script>`;

const url = env("WARREN_URL");
const token = env("WARREN_TOKEN");
const n = { pings: Number(env("WARREN_BENCH_PINGS")), connects: Number(env("WARREN_BENCH_CONNECTS")), turns: Number(env("WARREN_BENCH_TURNS")) };
// The edge's WebTransport endpoint and its dev certificate's hash, as GET /v1/regions publishes them.
const regions = (await (await fetch(`${url}/v1/regions`, { headers: { Authorization: `Bearer ${token}` } })).json()) as {
  region: string;
  regions: { name: string; webtransport?: string; certificateHashes?: unknown[] }[];
};
const mine = regions.regions.find((g) => g.name === regions.region);
if (!mine?.webtransport || !mine.certificateHashes?.length) throw new Error(`no WebTransport endpoint in /v1/regions: ${JSON.stringify(regions)}`);
const wt = JSON.stringify({ url: mine.webtransport, certificateHashes: mine.certificateHashes });

const site = await serve(page);
const dir = mkdtempSync(join(tmpdir(), "warren-chromium-"));
const { proc, ws } = await launch(env("WARREN_CHROMIUM"), dir);
try {
  const cdp = new CDP(ws);
  const q = new URLSearchParams({ url, token, wt, n: JSON.stringify(n), prompt: env("WARREN_BENCH_PROMPT") });
  const out = await runPage(cdp, `${site.url}/?${q}`);
  if (out.error) throw new Error(`in the browser: ${JSON.stringify(out)}\nconsole:\n${cdp.console.join("\n")}`);
  process.stdout.write(JSON.stringify(out) + "\n");
} finally {
  await stop(proc, ws);
  site.close();
  rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 }); // Chromium's helpers may still be writing there
}
