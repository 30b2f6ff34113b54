// The WebTransport transport (docs/PROTOCOL.md#webtransport), for browsers that have WebTransport: extended
// CONNECT /wt?token=JWT, one bidirectional stream, each message a 4-byte big-endian length and that many
// bytes of UTF-8 JSON; the session's close code is the WebSocket close code.

import { WarrenError } from "./errors.js";
import { type CloseInfo, type Connection, type Transport, WebSocketTransport, maxFrame } from "./transport.js";

/** A published certificate hash (GET /v1/regions' certificateHashes, as serverCertificateHashes wants). */
export interface CertificateHash {
  algorithm: string;
  /** Standard base64 of the SHA-256 of the DER certificate. */
  value: string;
}

/** Where the edge's WebTransport is: its URL and, for a self-signed dev certificate, its hashes. */
export interface WebTransportEndpoint {
  url: string;
  certificateHashes?: CertificateHash[];
}

// The browser's WebTransport API, as far as the transport uses it.
interface WT {
  readonly ready: Promise<void>;
  readonly closed: Promise<{ closeCode?: number; reason?: string }>;
  createBidirectionalStream(): Promise<{ readable: ReadableStream<Uint8Array>; writable: WritableStream<Uint8Array> }>;
  close(info?: { closeCode?: number; reason?: string }): void;
}
type WTConstructor = new (url: string, opts?: { serverCertificateHashes?: { algorithm: string; value: BufferSource }[] }) => WT;

/** Whether this platform has WebTransport. */
export function hasWebTransport(): boolean {
  return typeof (globalThis as { WebTransport?: unknown }).WebTransport === "function";
}

/**
 * The WebTransport transport. endpoint says where the edge's WebTransport is; without it the transport asks
 * the edge's GET /v1/regions (from a page on the edge's origin, or on one its CORS allowlist names).
 */
export class WebTransportTransport implements Transport {
  readonly name = "webtransport";
  constructor(private endpoint?: WebTransportEndpoint | (() => Promise<WebTransportEndpoint>)) {}

  async connect(baseURL: string, token: string, signal?: AbortSignal): Promise<Connection> {
    const ctor = (globalThis as { WebTransport?: WTConstructor }).WebTransport;
    if (!ctor) throw new WarrenError("unavailable", "this platform has no WebTransport");
    const ep = typeof this.endpoint === "function" ? await this.endpoint() : (this.endpoint ?? (await discover(baseURL, token, signal)));
    const u = new URL(ep.url);
    u.searchParams.set("token", token);
    const hashes = (ep.certificateHashes ?? [])
      .filter((h) => h.algorithm === "sha-256" && typeof h.value === "string")
      .map((h) => ({ algorithm: "sha-256", value: Uint8Array.from(atob(h.value), (c) => c.charCodeAt(0)) }));
    const wt = new ctor(u.toString(), hashes.length ? { serverCertificateHashes: hashes } : {});
    const onAbort = () => wt.close({ closeCode: 1000, reason: "" });
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      await wt.ready;
      const stream = await wt.createBidirectionalStream();
      return new WTConnection(wt, stream.readable, stream.writable);
    } catch (e) {
      wt.close();
      if (signal?.aborted) throw new WarrenError("timeout", "connect aborted", undefined, { cause: e });
      throw new WarrenError("unavailable", `WebTransport connection failed: ${e instanceof Error ? e.message : String(e)}`, undefined, { cause: e });
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }
}

async function discover(baseURL: string, token: string, signal?: AbortSignal): Promise<WebTransportEndpoint> {
  const u = new URL(baseURL);
  u.pathname = u.pathname.replace(/\/+$/, "") + "/v1/regions";
  const r = await fetch(u, { headers: { Authorization: `Bearer ${token}` }, signal });
  const v = (await r.json()) as { region?: string; regions?: { name?: string; webtransport?: string; certificateHashes?: CertificateHash[] }[] };
  const mine = v.regions?.find((g) => g.name === v.region && typeof g.webtransport === "string");
  if (!mine?.webtransport) throw new WarrenError("unavailable", "the edge lists no WebTransport URL");
  return { url: mine.webtransport, certificateHashes: Array.isArray(mine.certificateHashes) ? mine.certificateHashes : undefined };
}

class WTConnection implements Connection {
  readonly closed: Promise<CloseInfo>;
  peerEnded = false;
  private writer: WritableStreamDefaultWriter<Uint8Array>;
  private reader: ReadableStreamDefaultReader<Uint8Array>;
  private buf = new Uint8Array(0);
  private ended = false;
  private enc = new TextEncoder();
  private dec = new TextDecoder();

  constructor(
    private wt: WT,
    readable: ReadableStream<Uint8Array>,
    writable: WritableStream<Uint8Array>,
  ) {
    this.writer = writable.getWriter();
    this.reader = readable.getReader();
    this.closed = wt.closed.then(
      (c) => ({ code: c.closeCode || 1000, reason: c.reason ?? "", clean: c.closeCode !== 1006 }),
      () => ({ code: 1006, reason: "", clean: false }),
    );
  }

  send(text: string): void {
    if (this.ended) throw new WarrenError("unavailable", "the connection is closed");
    const body = this.enc.encode(text);
    const frame = new Uint8Array(4 + body.length);
    new DataView(frame.buffer).setUint32(0, body.length);
    frame.set(body, 4);
    this.writer.write(frame).catch(() => {});
  }

  async receive(): Promise<string | undefined> {
    for (;;) {
      if (this.buf.length >= 4) {
        const n = new DataView(this.buf.buffer, this.buf.byteOffset).getUint32(0);
        if (n === 0 || n > maxFrame + 64) {
          this.wt.close({ closeCode: n === 0 ? 4400 : 1009, reason: "bad frame length" });
          this.ended = true;
          return undefined;
        }
        if (this.buf.length >= 4 + n) {
          const text = this.dec.decode(this.buf.subarray(4, 4 + n));
          this.buf = this.buf.slice(4 + n);
          return text;
        }
      }
      if (this.ended) return undefined;
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await this.reader.read();
      } catch {
        chunk = { done: true, value: undefined };
      }
      if (chunk.done) {
        // The server ended its side: end ours; the session's close says why.
        this.ended = true;
        this.peerEnded = true;
        this.writer.close().catch(() => {});
        return undefined;
      }
      const b = new Uint8Array(this.buf.length + chunk.value.length);
      b.set(this.buf);
      b.set(chunk.value, this.buf.length);
      this.buf = b;
    }
  }

  close(code: number, reason = ""): void {
    this.ended = true;
    try {
      this.wt.close({ closeCode: code, reason });
    } catch {
      // closed already
    }
  }

  abort(): void {
    this.close(1006);
  }
}

/**
 * AutoTransport uses WebTransport where the platform has it and it connects within timeoutMs (default 3000),
 * else the WebSocket (UDP blocked, no WebTransport listed); after a WebTransport failure it uses the
 * WebSocket for fallbackMs (default a minute). `last` names the transport of the latest connection.
 */
export class AutoTransport implements Transport {
  readonly name = "auto";
  last = "";
  private wt: WebTransportTransport;
  private ws: Transport;
  private until = 0;

  constructor(
    endpoint?: WebTransportEndpoint | (() => Promise<WebTransportEndpoint>),
    private opts: { timeoutMs?: number; fallbackMs?: number; webSocket?: Transport } = {},
  ) {
    this.wt = new WebTransportTransport(endpoint);
    this.ws = opts.webSocket ?? new WebSocketTransport();
  }

  async connect(baseURL: string, token: string, signal?: AbortSignal): Promise<Connection> {
    if (hasWebTransport() && Date.now() >= this.until) {
      const timeout = AbortSignal.timeout(this.opts.timeoutMs ?? 3000);
      try {
        const c = await this.wt.connect(baseURL, token, signal ? AbortSignal.any([signal, timeout]) : timeout);
        this.last = this.wt.name;
        return c;
      } catch (e) {
        if (signal?.aborted) throw e;
        this.until = Date.now() + (this.opts.fallbackMs ?? 60000);
      }
    }
    const c = await this.ws.connect(baseURL, token, signal);
    this.last = this.ws.name;
    return c;
  }
}
