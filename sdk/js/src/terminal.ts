// Terminals (docs/PROTOCOL.md#terminals): a program on a pseudo-terminal in the sandbox, attached over a
// WebSocket. Binary messages are terminal bytes (output from the runner, keyboard input from the client);
// text messages are JSON control messages: resize from the client, exit from the runner.

import { WarrenError, errorFromClose } from "./errors.js";
import { type WSLike, edgeURL, webSocketClass } from "./transport.js";
import type { Requester } from "./sandbox.js";

/** Bounds of terminals (wire.MaxTermCols, MaxTermRows, MaxTermInput, MaxTermControl). */
export const maxTermCols = 1000;
export const maxTermRows = 1000;
export const maxTermInput = 64 << 10;
export const maxTermControl = 1024;

/** A terminal to create (wire.TermCreateRequest). Without command: an interactive shell. */
export interface TerminalRequest {
  command?: string;
  args?: string[];
  cwd?: string;
  env?: Record<string, string>;
  cols?: number;
  rows?: number;
}

/** A terminal (wire.TermInfo). */
export interface TerminalInfo {
  id: string;
  command: string;
  args?: string[];
  cwd: string;
  status: "running" | "exited";
  exitCode?: number;
  ended?: string;
  startedAt: string;
  endedAt?: string;
  cols: number;
  rows: number;
  attached: number;
  output: number;
}

/** A control message (wire.TermControl). */
export type TermControl = { type: "resize"; cols: number; rows: number } | { type: "exit"; code: number };

function checkSize(cols: number, rows: number): void {
  if (!Number.isInteger(cols) || !Number.isInteger(rows) || cols < 1 || cols > maxTermCols || rows < 1 || rows > maxTermRows) {
    throw new WarrenError("invalid_argument", `terminal size ${cols}x${rows} is out of bounds (columns 1 to ${maxTermCols}, rows 1 to ${maxTermRows})`);
  }
}

/** Reads and checks one control message as the runner does (wire.ParseTermControl); a WarrenError if bad. */
export function parseTermControl(text: string): TermControl {
  if (text.length > maxTermControl) throw new WarrenError("payload_too_large", `terminal control message exceeds ${maxTermControl} bytes`);
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new WarrenError("invalid_argument", "terminal control message is not JSON", undefined, { cause: e });
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new WarrenError("invalid_argument", "terminal control message is not an object");
  const o = v as Record<string, unknown>;
  const known = new Set(["type", "cols", "rows", "code"]);
  for (const k of Object.keys(o)) if (!known.has(k)) throw new WarrenError("invalid_argument", `unknown field ${JSON.stringify(k.slice(0, 32))}`);
  switch (o.type) {
    case "resize":
      if (typeof o.cols !== "number" || typeof o.rows !== "number" || o.code !== undefined) throw new WarrenError("invalid_argument", "a resize message has cols and rows");
      checkSize(o.cols, o.rows);
      return { type: "resize", cols: o.cols, rows: o.rows };
    case "exit":
      if (typeof o.code !== "number" || !Number.isInteger(o.code) || o.cols !== undefined || o.rows !== undefined) {
        throw new WarrenError("invalid_argument", "an exit message has a code and nothing else");
      }
      return { type: "exit", code: o.code };
    default:
      throw new WarrenError("invalid_argument", `unknown terminal control message type ${JSON.stringify(String(o.type).slice(0, 32))}`);
  }
}

function termPath(id: string, action = ""): string {
  return "/v1/sandbox/terminals/" + encodeURIComponent(id) + (action ? "/" + action : "");
}

// What terminals need of their client: REST requests, and the edge's URL and token for the WebSocket.
export interface TerminalClient extends Requester {
  readonly url: string;
  readonly token: string;
}

/** The terminals of the token's user's sandbox. */
export class Terminals {
  constructor(private c: TerminalClient) {}

  /** Creates a terminal; it runs on after every client detached, until it exits, is killed or the sandbox stops. */
  async create(req: TerminalRequest = {}, signal?: AbortSignal): Promise<TerminalInfo> {
    const r = await this.c.request("POST", "/v1/sandbox/terminals", { body: JSON.stringify(req), headers: { "Content-Type": "application/json" }, signal });
    return (await r.json()) as TerminalInfo;
  }

  /** Every terminal, running and exited, oldest first. */
  async list(signal?: AbortSignal): Promise<TerminalInfo[]> {
    const r = await this.c.request("GET", "/v1/sandbox/terminals", { signal });
    const v = (await r.json()) as { terminals?: TerminalInfo[] };
    return Array.isArray(v.terminals) ? v.terminals : [];
  }

  /** One terminal. */
  async get(id: string, signal?: AbortSignal): Promise<TerminalInfo> {
    const r = await this.c.request("GET", termPath(id), { signal });
    return (await r.json()) as TerminalInfo;
  }

  /** Sets a terminal's size. */
  async resize(id: string, cols: number, rows: number, signal?: AbortSignal): Promise<TerminalInfo> {
    const r = await this.c.request("POST", termPath(id, "resize"), { body: JSON.stringify({ cols, rows }), headers: { "Content-Type": "application/json" }, signal });
    return (await r.json()) as TerminalInfo;
  }

  /** Kills a terminal's program (if it runs) and forgets the terminal. */
  async kill(id: string, signal?: AbortSignal): Promise<void> {
    await this.c.request("DELETE", termPath(id), { signal });
  }

  /**
   * Attaches to a terminal: the output it kept (its last 64 KiB) comes first, then live output. A refused
   * attach (unknown terminal, too many clients) throws its WarrenError.
   */
  async attach(id: string): Promise<TerminalConnection> {
    // A refusal comes before the upgrade as an HTTP error, which a WebSocket cannot read: ask first.
    await this.get(id);
    const { ctor, headers } = await webSocketClass();
    const url = edgeURL(this.c.url, termPath(id, "attach"), headers ? {} : { token: this.c.token }, "ws");
    const ws = headers ? new ctor(url, undefined, { headers: { Authorization: `Bearer ${this.c.token}` }, maxPayload: maxTermInput + 64 }) : new ctor(url);
    ws.binaryType = "arraybuffer";
    const conn = new TerminalConnection(ws);
    await conn.opened;
    return conn;
  }
}

/** How a terminal connection ended: the program's exit code, or none when the client detached. */
export interface TerminalEnd {
  exitCode?: number;
}

/**
 * A client attached to a terminal: iterate it for output (Uint8Array chunks); write sends keyboard input
 * (Ctrl-C is "\x03"). `ended` settles when the connection ends: with the exit code after the program
 * exited, without one after close, rejected with the WarrenError of an abnormal close.
 */
export class TerminalConnection implements AsyncIterable<Uint8Array> {
  readonly opened: Promise<void>;
  readonly ended: Promise<TerminalEnd>;
  private queue: Uint8Array[] = [];
  private waiter?: () => void;
  private done = false;
  private exitCode?: number;
  private enc = new TextEncoder();

  constructor(private ws: WSLike) {
    let open!: () => void;
    let fail!: (e: unknown) => void;
    this.opened = new Promise((res, rej) => {
      open = res;
      fail = rej;
    });
    this.opened.catch(() => {});
    let settle!: (e: TerminalEnd) => void;
    let reject!: (e: unknown) => void;
    this.ended = new Promise((res, rej) => {
      settle = res;
      reject = rej;
    });
    this.ended.catch(() => {});
    ws.onopen = () => open();
    ws.onerror = () => {};
    ws.onmessage = (ev) => {
      if (typeof ev.data === "string") {
        try {
          const c = parseTermControl(ev.data);
          if (c.type === "exit") this.exitCode = c.code;
        } catch {
          this.ws.close(4400, JSON.stringify({ code: "invalid_argument", message: "bad control message" }));
        }
        return;
      }
      const data = ev.data instanceof ArrayBuffer ? new Uint8Array(ev.data) : new Uint8Array(ev.data as ArrayLike<number>);
      this.queue.push(data);
      this.wake();
    };
    ws.onclose = (ev) => {
      this.done = true;
      fail(new WarrenError("unavailable", `terminal connection failed (close ${ev.code})`, undefined, { closeCode: ev.code }));
      const err = this.exitCode === undefined ? errorFromClose(ev.code, ev.reason ?? "") : undefined;
      if (err) reject(err);
      else settle(this.exitCode === undefined ? {} : { exitCode: this.exitCode });
      this.wake();
    };
  }

  private wake() {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  /** Sends keyboard input, in messages of at most 64 KiB. */
  write(data: string | Uint8Array): void {
    if (this.done || this.ws.readyState !== 1) throw new WarrenError("unavailable", "the terminal connection is closed");
    const b = typeof data === "string" ? this.enc.encode(data) : data;
    for (let i = 0; i < b.length; i += maxTermInput) this.ws.send(b.subarray(i, i + maxTermInput));
  }

  /** Sets the terminal's size; the program gets SIGWINCH. */
  resize(cols: number, rows: number): void {
    checkSize(cols, rows);
    if (this.done || this.ws.readyState !== 1) throw new WarrenError("unavailable", "the terminal connection is closed");
    this.ws.send(JSON.stringify({ type: "resize", cols, rows }));
  }

  /** Detaches; the terminal runs on. */
  close(): void {
    try {
      this.ws.close(1000, "");
    } catch {
      // already closed
    }
  }

  /** The exit code once the program exited and its output was read; undefined before. */
  get exit(): number | undefined {
    return this.done ? this.exitCode : undefined;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    for (;;) {
      const m = this.queue.shift();
      if (m !== undefined) {
        yield m;
        continue;
      }
      if (this.done) return;
      await new Promise<void>((r) => (this.waiter = r));
    }
  }
}
