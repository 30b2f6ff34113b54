// Headless Chromium for the browser build's test (browser.test.ts) and benchmark (bench/browser.ts): a static
// server for a page and the SDK's compiled modules, Chromium launched with a DevTools port, and a DevTools
// protocol client. No tests here.

import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { dirname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";

import WebSocket from "ws";

const srcDir = join(dirname(fileURLToPath(import.meta.url)), "..", "src");

// A static server for the page and the SDK's compiled modules.
export async function serve(page: string): Promise<{ url: string; close: () => void }> {
  const srv = createServer((req, res) => {
    const u = new URL(req.url ?? "/", "http://x");
    if (u.pathname === "/") {
      res.writeHead(200, { "Content-Type": "text/html" }).end(page);
      return;
    }
    const rel = normalize(u.pathname.replace(/^\/sdk\//, ""));
    if (!u.pathname.startsWith("/sdk/") || rel.startsWith("..") || !rel.endsWith(".js")) {
      res.writeHead(404).end();
      return;
    }
    try {
      res.writeHead(200, { "Content-Type": "text/javascript" }).end(readFileSync(join(srcDir, rel)));
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, close: () => srv.close() };
}

// A DevTools protocol client over one WebSocket (flattened sessions).
export class CDP {
  private id = 0;
  private calls = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  readonly console: string[] = [];
  constructor(private ws: WebSocket) {
    ws.on("message", (data) => {
      const m = JSON.parse(String(data));
      if (m.id !== undefined) {
        const c = this.calls.get(m.id);
        this.calls.delete(m.id);
        if (m.error) c?.reject(new Error(`${m.error.message} (${m.error.code})`));
        else c?.resolve(m.result);
      } else if (m.method === "Runtime.consoleAPICalled") {
        this.console.push(m.params.args.map((a: { value?: unknown; description?: string }) => a.value ?? a.description).join(" "));
      } else if (m.method === "Runtime.exceptionThrown") {
        this.console.push("exception: " + JSON.stringify(m.params.exceptionDetails).slice(0, 2000));
      }
    });
  }
  send(method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<any> {
    const id = ++this.id;
    this.ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
    return new Promise((resolve, reject) => this.calls.set(id, { resolve, reject }));
  }
}

export async function launch(chromium: string, dir: string): Promise<{ proc: ChildProcess; ws: WebSocket }> {
  const proc = spawn(
    chromium,
    ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--remote-debugging-port=0", `--user-data-dir=${dir}`, "about:blank"],
    // A process group of its own, killed whole at the end: Chromium's helpers outlive a killed browser.
    { stdio: ["ignore", "ignore", "pipe"], detached: true },
  );
  // Chromium prints "DevTools listening on ws://..." on stderr.
  const url = await new Promise<string>((resolve, reject) => {
    let err = "";
    proc.stderr!.on("data", (b) => {
      err += String(b);
      const m = /DevTools listening on (ws:\/\/\S+)/.exec(err);
      if (m) resolve(m[1]!);
    });
    proc.on("exit", (code) => reject(new Error(`chromium exited with ${code}: ${err.slice(-2000)}`)));
  });
  const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 64 << 20 });
  await new Promise((r, j) => ws.once("open", r).once("error", j));
  return { proc, ws };
}

// Navigates a new tab to url and returns the value its module sets as window.__result (a promise).
export async function runPage(cdp: CDP, url: string): Promise<any> {
  const { targetId } = await cdp.send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await cdp.send("Target.attachToTarget", { targetId, flatten: true });
  await cdp.send("Runtime.enable", {}, sessionId);
  await cdp.send("Page.navigate", { url }, sessionId);
  // Wait for the module to have set __result, then for its promise.
  for (;;) {
    // A navigation in progress destroys the context the evaluation runs in: ask again.
    const r = await cdp
      .send("Runtime.evaluate", { expression: "window.__result", awaitPromise: true, returnByValue: true }, sessionId)
      .catch(() => undefined);
    if (r?.result?.type === "object") return r.result.value;
    await new Promise((res) => setTimeout(res, 100));
  }
}

// Closes what launch opened.
export async function stop(proc: ChildProcess, ws: WebSocket): Promise<void> {
  ws.close();
  if (proc.exitCode === null) {
    const exited = new Promise((r) => proc.once("exit", r));
    try {
      process.kill(-proc.pid!, "SIGKILL");
    } catch {
      proc.kill("SIGKILL");
    }
    await exited;
  }
}
