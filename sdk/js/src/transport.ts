// Transports of the agent channel (docs/PROTOCOL.md#transports). A transport carries the same JSON
// messages, one per frame; the session does not care which one it has.

import { WarrenError } from "./errors.js";

/** The largest frame either side sends (wire.MaxFrame, 4 MiB). */
export const maxFrame = 4 << 20;

/** How a connection ended. */
export interface CloseInfo {
  code: number;
  reason: string;
  /** false when the connection was lost without a close handshake (1006). */
  clean: boolean;
}

/** One connection of the agent channel. */
export interface Connection {
  /** Sends one message. Throws a WarrenError when the connection is gone. */
  send(text: string): void;
  /** The next message; undefined once the connection has ended (then `closed` is settled). */
  receive(): Promise<string | undefined>;
  /** Closes with a close handshake. */
  close(code: number, reason?: string): void;
  /** Drops the connection at once, without a close handshake (as a network failure would). */
  abort(): void;
  /** Settles when the connection has ended. */
  readonly closed: Promise<CloseInfo>;
  /**
   * Set (WebTransport) once the server ended its side of the stream cleanly: what follows is the session's
   * close, which Chromium sometimes reports as lost (1006) all the same (docs/PROTOCOL.md#webtransport).
   */
  readonly peerEnded?: boolean;
}

/** A way to reach an edge's agent channel. */
export interface Transport {
  readonly name: string;
  /** Opens a connection to the edge at baseURL (http(s)) with token. */
  connect(baseURL: string, token: string, signal?: AbortSignal): Promise<Connection>;
}

/** The WebSocket API the SDK needs: the browser's (WHATWG) one, which the ws package also offers. */
export interface WSLike {
  readonly readyState: number;
  binaryType: string;
  send(data: string | Uint8Array): void;
  close(code?: number, reason?: string): void;
  terminate?: () => void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string; wasClean: boolean }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
}
type WSConstructor = new (url: string, protocols?: string | string[], options?: unknown) => WSLike;

let nodeWS: Promise<WSConstructor> | undefined;

/**
 * The WebSocket class: the platform's, else (Node 20) the ws package's, which also lets the token go in a
 * header instead of the URL (headers: true).
 */
export async function webSocketClass(): Promise<{ ctor: WSConstructor; headers: boolean }> {
  const g = (globalThis as { WebSocket?: WSConstructor }).WebSocket;
  if (g && typeof process === "undefined") return { ctor: g, headers: false };
  nodeWS ??= import("ws").then((m) => (m.default ?? m.WebSocket) as unknown as WSConstructor);
  try {
    return { ctor: await nodeWS, headers: true };
  } catch (e) {
    if (g) return { ctor: g, headers: false };
    throw new WarrenError("unavailable", "no WebSocket: install the ws package", undefined, { cause: e });
  }
}

/** The ws(s) URL of path on the edge at baseURL, with query parameters. */
export function edgeURL(baseURL: string, path: string, query?: Record<string, string>, scheme?: "ws"): string {
  const u = new URL(baseURL);
  u.pathname = u.pathname.replace(/\/+$/, "") + path;
  if (scheme === "ws") u.protocol = u.protocol === "https:" || u.protocol === "wss:" ? "wss:" : "ws:";
  for (const [k, v] of Object.entries(query ?? {})) u.searchParams.set(k, v);
  return u.toString();
}

/** The WebSocket transport: GET /ws, one JSON message per text frame. */
export class WebSocketTransport implements Transport {
  readonly name = "websocket";

  async connect(baseURL: string, token: string, signal?: AbortSignal): Promise<Connection> {
    const { ctor, headers } = await webSocketClass();
    const url = edgeURL(baseURL, "/ws", headers ? {} : { token }, "ws");
    const ws = headers
      ? new ctor(url, undefined, { headers: { Authorization: `Bearer ${token}` }, maxPayload: maxFrame + 64 })
      : new ctor(url);
    ws.binaryType = "arraybuffer";
    const conn = new WSConnection(ws);
    await new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        conn.abort();
        reject(signal?.reason instanceof Error ? signal.reason : new WarrenError("timeout", "connect aborted"));
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener("abort", onAbort, { once: true });
      conn.opened.then(
        () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
        (e) => {
          signal?.removeEventListener("abort", onAbort);
          reject(e);
        },
      );
    });
    return conn;
  }
}

class WSConnection implements Connection {
  readonly closed: Promise<CloseInfo>;
  readonly opened: Promise<void>;
  private queue: string[] = [];
  private waiter?: () => void;
  private ended = false;
  private info?: CloseInfo;

  constructor(private ws: WSLike) {
    let settle!: (i: CloseInfo) => void;
    this.closed = new Promise((r) => (settle = r));
    let open!: () => void;
    let fail!: (e: unknown) => void;
    this.opened = new Promise((res, rej) => {
      open = res;
      fail = rej;
    });
    this.opened.catch(() => {}); // read by connect only
    ws.onopen = () => open();
    ws.onmessage = (ev) => {
      if (typeof ev.data !== "string") {
        // The protocol has no binary frames.
        this.ws.close(4400, JSON.stringify({ code: "invalid_argument", message: "binary frame" }));
        return;
      }
      this.queue.push(ev.data);
      this.wake();
    };
    ws.onerror = () => {};
    ws.onclose = (ev) => {
      this.ended = true;
      this.info = { code: ev.code, reason: ev.reason ?? "", clean: ev.wasClean && ev.code !== 1006 };
      // The upgrade was refused or the connection failed before it opened.
      fail(new WarrenError("unavailable", `WebSocket connection failed (close ${ev.code})`, undefined, { closeCode: ev.code }));
      settle(this.info);
      this.wake();
    };
  }

  private wake() {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  send(text: string): void {
    if (this.ended || this.ws.readyState !== 1) {
      throw new WarrenError("unavailable", "the connection is closed", undefined, { closeCode: this.info?.code });
    }
    this.ws.send(text);
  }

  async receive(): Promise<string | undefined> {
    for (;;) {
      const m = this.queue.shift();
      if (m !== undefined) return m;
      if (this.ended) return undefined;
      await new Promise<void>((r) => (this.waiter = r));
    }
  }

  close(code: number, reason = ""): void {
    try {
      this.ws.close(code, reason);
    } catch {
      this.abort();
    }
  }

  abort(): void {
    if (this.ws.terminate) this.ws.terminate();
    else this.ws.close(4000, "aborted"); // browsers cannot drop a socket; an application close code
  }
}
