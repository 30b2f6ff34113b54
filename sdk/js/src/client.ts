// The client of one edge: agent sessions, the sandbox API and the region list, with one end user's token.

import { WarrenError, errorFromHTTP } from "./errors.js";
import type { ServerMessage } from "./events.js";
import { Tasks } from "./execute.js";
import { Sandbox } from "./sandbox.js";
import { Terminals } from "./terminal.js";
import { type ConnectOptions, Session, type SessionOptions } from "./session.js";
import { type Transport, WebSocketTransport, edgeURL } from "./transport.js";

/** Options of a Client. */
export interface ClientOptions {
  /** The agent channel's transport (default: WebSocket). */
  transport?: Transport;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

/** One region as an edge lists it (GET /v1/regions). */
export interface Region {
  name: string;
  url: string;
  webtransport?: string;
  /** "ok", or "draining" when the region is leaving: choose another. */
  health: string;
  edges: number;
}

/** One part of a budget (GET /v1/me): -1 in limit and remaining is unlimited. */
export interface Allowance {
  limit: number;
  used: number;
  remaining: number;
}

/** The user's own view (GET /v1/me, docs/PROTOCOL.md#me): budget left, sandbox state, limits in force. */
export interface Me {
  iss: string;
  sub: string;
  /** The region of the edge that answered. */
  region: string;
  budget: {
    window: string;
    /** Absent for a lifetime budget. */
    windowStart?: string;
    /** When the next window begins; absent for a lifetime budget. */
    resetsAt?: string;
    /** Microdollars. */
    ai: Allowance;
    /** Seconds. */
    compute: Allowance;
  };
  sandbox: {
    state: "absent" | "starting" | "running" | "asleep" | "unknown";
    region?: string;
    epoch?: number;
    since?: string;
  };
  /** live is -1 when the edge keeps no session leases; max -1 is unlimited. */
  sessions: { live: number; max: number };
  rates: { connectsPerMinute: number; promptsPerMinute: number };
  /** The sandbox's hard limits from the quota; a field absent is the runner's default. */
  limits: Record<string, number>;
}

/** A region's measured round trips to its edge. */
export interface Probe {
  region: Region;
  rttsMs: number[];
  error?: Error;
}

// Bounds of the answers read into memory.
const maxErrorBody = 64 << 10;
const maxRegionsBody = 256 << 10;
const maxMeBody = 64 << 10;
const maxRegions = 256;

/** A client of one edge with one end user's token. */
export class Client {
  readonly url: string;
  readonly transport: Transport;
  /** The sandbox of the token's user. */
  readonly sandbox: Sandbox;
  /** The one-shot tasks of the token's user (POST /v1/execute). */
  readonly tasks: Tasks;
  /** The terminals of the token's user's sandbox. */
  readonly terminals: Terminals;
  private fetchFn: typeof fetch;
  private tok: string;

  constructor(baseURL: string, token: string, opts: ClientOptions = {}) {
    if (typeof baseURL !== "string") throw new WarrenError("invalid_argument", `the edge URL must be a string, not ${typeOf(baseURL)}`);
    if (typeof opts !== "object" || opts === null) throw new WarrenError("invalid_argument", `client options must be an object, not ${typeOf(opts)}`);
    let u: URL;
    try {
      u = new URL(baseURL);
    } catch (e) {
      throw new WarrenError("invalid_argument", `edge URL ${JSON.stringify(baseURL.slice(0, 200))} is not a URL`, undefined, { cause: e });
    }
    if (u.protocol === "ws:") u.protocol = "http:";
    if (u.protocol === "wss:") u.protocol = "https:";
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new WarrenError("invalid_argument", `edge URL scheme ${u.protocol} is not http(s) or ws(s)`);
    u.pathname = u.pathname.replace(/\/ws\/?$/, "").replace(/\/+$/, "");
    u.search = "";
    u.hash = "";
    this.url = u.toString().replace(/\/+$/, "");
    this.tok = checkToken(token);
    this.transport = opts.transport ?? new WebSocketTransport();
    this.fetchFn = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.sandbox = new Sandbox(this);
    this.tasks = new Tasks(this);
    this.terminals = new Terminals(this);
  }

  /** The end user's token this client sends. */
  get token(): string {
    return this.tok;
  }

  /**
   * Replaces the token with a renewed one (for the same user, before the old one expires): requests and
   * reconnects from now on send it; connections already open keep going (the edge checks a token when a
   * connection opens).
   */
  setToken(token: string): void {
    this.tok = checkToken(token);
  }

  /** Opens an agent session. */
  connect(opts: ConnectOptions = {}): Promise<Session> {
    return Session.open(this, opts);
  }

  /** Reconnects to session sessionId and replays the messages after lastSeq, then the live ones. */
  resume(sessionId: string, lastSeq: number, opts: ConnectOptions = {}): Promise<Session> {
    return Session.open(this, { ...opts, options: { ...opts.options, sessionId, lastSeq } });
  }

  /** A new session continuing from a copy of session sessionId's transcript. */
  fork(sessionId: string, opts: ConnectOptions = {}): Promise<Session> {
    return Session.open(this, { ...opts, options: { ...opts.options, sessionId, forkSession: true } });
  }

  /** A new session continuing the user's most recent transcript. */
  continue(opts: ConnectOptions = {}): Promise<Session> {
    return Session.open(this, { ...opts, options: { ...opts.options, continue: true } });
  }

  /** One-shot: opens a session, sends prompt, yields its turn up to the result and closes the session. */
  async *query(prompt: string, opts: ConnectOptions = {}): AsyncGenerator<ServerMessage, void, undefined> {
    const s = await this.connect(opts);
    try {
      yield* s.prompt(prompt, opts.signal);
    } finally {
      await s.close();
    }
  }

  /** An HTTP request to the edge with the token; a non-2xx answer throws its WarrenError. */
  async request(
    method: string,
    path: string,
    init: { query?: Record<string, string>; body?: BodyInit; headers?: Record<string, string>; signal?: AbortSignal } = {},
  ): Promise<Response> {
    const u = new URL(edgeURL(this.url, path, init.query));
    let r: Response;
    try {
      r = await this.fetchFn(u, {
        method,
        body: init.body,
        headers: { ...init.headers, Authorization: `Bearer ${this.token}` },
        signal: init.signal,
        ...(init.body instanceof ReadableStream ? { duplex: "half" } : {}),
      } as RequestInit);
    } catch (e) {
      if (init.signal?.aborted) throw e;
      throw new WarrenError("unavailable", `${method} ${path}: ${e instanceof Error ? e.message : String(e)}`, undefined, { cause: e });
    }
    if (!r.ok) throw errorFromHTTP(r.status, await readBounded(r, maxErrorBody));
    return r;
  }

  /** The user's own view: budget left per window, the sandbox's state and region, live sessions and the
   * limits in force. Starts nothing; answers with a spent budget too. */
  async me(signal?: AbortSignal): Promise<Me> {
    const r = await this.request("GET", "/v1/me", { signal });
    const text = await readBounded(r, maxMeBody + 1);
    if (text.length > maxMeBody) throw new WarrenError("internal", `GET /v1/me: the answer is over ${maxMeBody} bytes`);
    try {
      return JSON.parse(text) as Me;
    } catch (e) {
      throw new WarrenError("internal", "GET /v1/me: the answer is not JSON", undefined, { cause: e });
    }
  }

  /** The regions the edge knows, with their public URLs and health. */
  async regions(signal?: AbortSignal): Promise<{ region: string; regions: Region[] }> {
    const r = await this.request("GET", "/v1/regions", { signal });
    return parseRegions(await readBounded(r, maxRegionsBody + 1));
  }

  /**
   * The client of the nearest healthy region: asks the edge at seedURL for the regions, measures each
   * region's edge n times (GET /healthz) and picks the fastest by median. A seed reached over TLS leads
   * only to regions reached over TLS.
   */
  static async nearest(seedURL: string, token: string, opts: ClientOptions & { probes?: number; signal?: AbortSignal } = {}): Promise<{ client: Client; probes: Probe[] }> {
    const seed = new Client(seedURL, token, opts);
    let { regions } = await seed.regions(opts.signal);
    if (seed.url.startsWith("https:")) regions = regions.filter((r) => /^(https|wss):/.test(r.url));
    const probes = await Promise.all(regions.map((r) => probe(seed.fetchFn, r, opts.probes ?? 3, opts.signal)));
    const median = (p: Probe) => [...p.rttsMs].sort((a, b) => a - b)[p.rttsMs.length >> 1]!;
    const ok = probes.filter((p) => p.region.health === "ok" && p.rttsMs.length > 0).sort((a, b) => median(a) - median(b));
    if (!ok.length) throw new WarrenError("unavailable", `no healthy region answered (${regions.length} listed)`);
    return { client: new Client(ok[0]!.region.url, token, opts), probes };
  }
}

// typeOf names what a caller passed instead of the value it should have.
const typeOf = (v: unknown) => (v === null ? "null" : Array.isArray(v) ? "an array" : typeof v);

/** Reads a GET /v1/regions answer, keeping the regions with an absolute http(s) or ws(s) URL. */
export function parseRegions(text: string): { region: string; regions: Region[] } {
  if (text.length > maxRegionsBody) throw new WarrenError("internal", `regions answer over ${maxRegionsBody} bytes`);
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new WarrenError("internal", "regions answer is not JSON", undefined, { cause: e });
  }
  const o = typeof v === "object" && v !== null ? (v as { region?: unknown; regions?: unknown }) : {};
  if (!Array.isArray(o.regions)) throw new WarrenError("internal", "regions answer has no regions list");
  if (o.regions.length > maxRegions) throw new WarrenError("internal", `${o.regions.length} regions listed, at most ${maxRegions}`);
  const regions = (o.regions as Record<string, unknown>[]).filter((r): r is Record<string, unknown> & Region => {
    if (typeof r !== "object" || r === null || typeof r.name !== "string" || r.name === "" || typeof r.url !== "string") return false;
    try {
      const u = new URL(r.url);
      return ["http:", "https:", "ws:", "wss:"].includes(u.protocol) && u.host !== "";
    } catch {
      return false;
    }
  });
  return { region: typeof o.region === "string" ? o.region : "", regions };
}

async function probe(f: typeof fetch, region: Region, n: number, signal?: AbortSignal): Promise<Probe> {
  const p: Probe = { region, rttsMs: [] };
  const u = new URL(region.url.replace(/^ws/, "http"));
  u.pathname = u.pathname.replace(/\/+$/, "") + "/healthz";
  const get = async () => {
    const r = await f(u, { signal: signal ?? AbortSignal.timeout(5000) });
    await r.arrayBuffer();
    if (r.status !== 200) throw new WarrenError(r.status >= 500 ? "unavailable" : "internal", `probe ${region.name}: status ${r.status}`);
  };
  try {
    await get(); // sets the connection up: not what the region costs later
    for (let i = 0; i < Math.max(n, 1); i++) {
      const start = performance.now();
      await get();
      p.rttsMs.push(performance.now() - start);
    }
  } catch (e) {
    p.error = e instanceof Error ? e : new Error(String(e));
  }
  return p;
}

// The body of r as text, at most max bytes.
async function readBounded(r: Response, max: number): Promise<string> {
  if (!r.body) return "";
  const reader = r.body.getReader();
  const parts: Uint8Array[] = [];
  let n = 0;
  try {
    while (n < max) {
      const { value, done } = await reader.read();
      if (done) break;
      parts.push(value);
      n += value.length;
    }
  } finally {
    void reader.cancel().catch(() => {});
  }
  const all = new Uint8Array(Math.min(n, max));
  let off = 0;
  for (const p of parts) {
    const take = Math.min(p.length, all.length - off);
    all.set(p.subarray(0, take), off);
    off += take;
  }
  return new TextDecoder().decode(all);
}

export type { SessionOptions };

function checkToken(token: unknown): string {
  if (typeof token !== "string") throw new WarrenError("unauthenticated", `the token must be a string, not ${typeOf(token)}`);
  if (!token) throw new WarrenError("unauthenticated", "no token");
  return token;
}
