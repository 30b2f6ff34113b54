// Agent sessions (docs/PROTOCOL.md#agent-channel): prompts go out, the agent's events come back, and a
// connection lost for a reason that is not final is replaced by one that resumes after the last seq
// received (docs/PROTOCOL.md#resume).

import { SessionClosedError, WarrenError, closeCodeFor, errorFromClose, isCode } from "./errors.js";
import {
  type ServerMessage,
  messageError,
  parseServerMessage,
  promptOf,
  readyData,
  sessionState,
  toolCall,
} from "./events.js";
import { type ToolResult, type ToolServer, runTool } from "./tools.js";
import { type Connection, type Transport, maxFrame } from "./transport.js";

/**
 * The init payload (docs/PROTOCOL.md#session-options): the Claude Agent SDK's session options Warren
 * honours. The edge validates them; unknown options are refused, never dropped.
 */
export interface SessionOptions {
  model?: string;
  fallbackModel?: string;
  systemPrompt?: string | { type: "preset"; preset: "claude_code"; append?: string; excludeDynamicSections?: boolean };
  maxTurns?: number;
  maxBudgetUsd?: number;
  maxThinkingTokens?: number;
  thinking?: { type: "adaptive" | "enabled" | "disabled"; budgetTokens?: number };
  effort?: "low" | "medium" | "high" | "xhigh" | "max";
  tools?: string[] | { type: "preset"; preset: "claude_code" };
  allowedTools?: string[];
  disallowedTools?: string[];
  permissionMode?: "acceptEdits" | "auto" | "bypassPermissions" | "default" | "dontAsk" | "manual" | "plan";
  env?: Record<string, string>;
  includePartialMessages?: boolean;
  includeHookEvents?: boolean;
  outputFormat?: { type: "json_schema"; schema: Record<string, unknown> };
  agents?: Record<string, { description: string; prompt: string; tools?: string[]; disallowedTools?: string[]; model?: string; maxTurns?: number }>;
  agent?: string;
  betas?: string[];
  settingSources?: ("user" | "project" | "local")[];
  additionalDirectories?: string[];
  strictMcpConfig?: boolean;
  enableFileCheckpointing?: boolean;
  /** Attach to (reconnect) or resume this session. */
  sessionId?: string;
  /** With sessionId: resume the transcript only up to this message uuid. */
  resumeSessionAt?: string;
  /** With sessionId: a new session starting from a copy of that one's transcript. */
  forkSession?: boolean;
  /** Without sessionId: continue the most recent transcript. */
  continue?: boolean;
  cwd?: string;
  /** Replay the messages after this seq. */
  lastSeq?: number;
  /** Client tool servers (see ToolServer.mcpServer) and MCP servers. */
  mcpServers?: Record<string, unknown>[];
}

/** The reconnect policy (docs/PROTOCOL.md#resume). */
export interface ReconnectOptions {
  /** Attempts per loss (default 16). */
  maxAttempts?: number;
  /** Backoff before the second attempt, doubling up to maxBackoffMs (defaults 250 and 10000), with jitter. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Total time one reconnect may take (default 120000). */
  timeoutMs?: number;
  /** Per attempt: connect and handshake (default 10000). */
  dialTimeoutMs?: number;
  /** Other edges (base URLs) to try, after the dialled one's successor; any edge reaches the session. */
  edges?: string[];
  /** Called after each reconnect attempt. */
  onAttempt?: (ev: { attempt: number; edge: string; error?: WarrenError | Error }) => void;
}

/** How a session is opened. */
export interface ConnectOptions {
  /** The init payload. */
  options?: SessionOptions;
  /** Client tools: declared in init and answered by their handlers as their tool_calls arrive. */
  tools?: ToolServer[];
  /** Reconnect after a lost connection (the default); false ends the session on the first loss. */
  reconnect?: ReconnectOptions | false;
  /** Bounds the connect and the wait for ready (not the session). */
  signal?: AbortSignal;
}

// What a session needs of its client.
export interface SessionHost {
  readonly url: string;
  readonly token: string;
  readonly transport: Transport;
}

const closeTimeoutMs = 5000;
const defaultDialTimeoutMs = 10000;

// A message on its way out of the reader: a connection lost before it was read is retried, as Go's.
class Lost {
  constructor(
    readonly error: WarrenError,
    readonly retry: boolean,
  ) {}
}

/**
 * Session is one agent channel. Iterate it (`for await (const m of session)`) for every server message in
 * order, the handshake first; `prompt()` sends a prompt and yields its turn. Messages are queued whether or
 * not anyone reads, so ping and close work at any time.
 */
export class Session implements AsyncIterable<ServerMessage> {
  /** The session id the server assigned (or resumed). */
  id = "";
  /** The model the agent calls. */
  model = "";
  /** The region of the edge serving the session. */
  region = "";
  /** What the platform asked to tell the user ("" if nothing), e.g. that a scripted model answers. */
  notice = "";
  /** Connections that replaced a lost one. */
  reconnects = 0;

  private conn!: Connection;
  private edges: string[];
  private cur = 0;
  private opts: SessionOptions;
  private tools: ToolServer[];
  private policy: ReconnectOptions | false;
  private queue: ServerMessage[] = [];
  private waiter?: () => void;
  private recvSeq = 0;
  private handedSeq = 0;
  private lastErr?: WarrenError;
  private pings = new Map<number, () => void>();
  private lastPing = 0;
  private calls = new ToolCalls();
  private closing = false;
  private ended = false;
  private endError?: Error;
  private endTaken = false;
  private up?: Promise<void>; // while reconnecting: settles when it is over
  private finished!: Promise<void>;
  private closeOnce?: Promise<void>;
  // Prompts sent whose turn has not been seen starting, sent again after a reconnect to a runner that
  // dedupes them (docs/PROTOCOL.md#prompt-identity); bounded.
  private unstarted: { uuid: string; text: string }[] = [];
  private dedupes = false; // the last ready said promptUuids

  private constructor(
    private host: SessionHost,
    o: ConnectOptions,
  ) {
    this.tools = o.tools ?? [];
    this.opts = { ...(o.options ?? {}) };
    if (this.tools.length) this.opts.mcpServers = [...(this.opts.mcpServers ?? []), ...this.tools.map((t) => t.mcpServer())];
    this.policy = o.reconnect ?? {};
    this.edges = [host.url, ...(this.policy ? (this.policy.edges ?? []) : [])].filter((u, i, a) => a.indexOf(u) === i);
    if (this.opts.lastSeq !== undefined) this.recvSeq = this.handedSeq = this.opts.lastSeq;
  }

  /** Opens a session: connects, sends init and waits for ready. A refusal is a WarrenError. */
  static async open(host: SessionHost, o: ConnectOptions = {}): Promise<Session> {
    const s = new Session(host, o);
    if (s.policy && new URL(host.url).protocol === "https:" && s.edges.some((e) => new URL(e).protocol !== "https:")) {
      throw new WarrenError("invalid_argument", "a reconnect edge is not TLS while the dialled edge is: the token would travel in the clear");
    }
    const conn = await host.transport.connect(host.url, host.token, o.signal);
    try {
      await s.handshake(conn, s.opts, false, o.signal);
    } catch (e) {
      conn.abort();
      throw e;
    }
    s.conn = conn;
    s.finished = s.run();
    return s;
  }

  /** The seq of the last message handed out: resume after it (Client.resume) if the session is lost. */
  get lastSeq(): number {
    return this.handedSeq;
  }

  /** The base URL of the edge the current connection goes through (it changes when a reconnect goes elsewhere). */
  get edge(): string {
    return this.edges[this.cur]!;
  }

  /** The error that ended the session: undefined while it is open and after a normal close. */
  get error(): Error | undefined {
    return this.ended ? this.endError : undefined;
  }

  private async handshake(conn: Connection, opts: SessionOptions, resumed: boolean, signal?: AbortSignal): Promise<void> {
    try {
      conn.send(JSON.stringify({ type: "init", payload: opts }));
    } catch {
      // Closed already: an edge that refuses the connection sends an error and closes at once; read why.
    }
    const from = this.recvSeq;
    let fail: (() => void) | undefined;
    const abort = new Promise<never>((_, reject) => {
      fail = () => {
        conn.abort();
        reject(new WarrenError("timeout", "waiting for the session to be ready: aborted", undefined, { cause: signal?.reason }));
      };
      if (signal?.aborted) fail();
      signal?.addEventListener("abort", fail, { once: true });
    });
    abort.catch(() => {});
    try {
      await this.awaitReady(conn, resumed, from, abort);
    } finally {
      signal?.removeEventListener("abort", fail!);
    }
  }

  // Reads conn until control ready, queueing what comes before it (on a resume, only what was not received).
  private async awaitReady(conn: Connection, resumed: boolean, from: number, abort: Promise<never>): Promise<void> {
    for (;;) {
      const text = await Promise.race([conn.receive(), abort]);
      if (text === undefined) {
        const info = await conn.closed;
        throw (
          errorFromClose(info.code, info.reason, this.lastErr) ??
          new WarrenError("unavailable", "the server closed the channel before the session was ready", undefined, { closeCode: info.code })
        );
      }
      const m = parseServerMessage(text);
      const replayed = from > 0 && (m.seq ?? 0) > from;
      const err = messageError(m);
      if (err) {
        this.lastErr = err;
        if (!replayed) throw await withCloseCode(conn, err);
      }
      const rd = readyData(m);
      if (resumed) {
        if (rd) {
          if (rd.sessionId !== this.id) {
            throw new WarrenError("internal", `the edge resumed session ${JSON.stringify(rd.sessionId)} instead of ${JSON.stringify(this.id)}`);
          }
          this.region = rd.region ?? this.region;
          this.dedupes = rd.promptUuids === true;
          return;
        }
        if (sessionState(m) === "initializing") continue;
        this.push(m, true);
        continue;
      }
      this.push(m, false);
      if (rd) {
        this.id = rd.sessionId;
        this.region = rd.region ?? "";
        this.model = rd.model ?? "";
        this.notice = rd.notice ?? "";
        this.dedupes = rd.promptUuids === true;
        return;
      }
    }
  }

  // Reads connections until the session ends, replacing lost ones.
  private async run(): Promise<void> {
    let end: Error | undefined;
    for (let resumed = false; ; resumed = true) {
      const lost = await this.readLoop(this.conn, resumed);
      if (!lost) break;
      if (!lost.retry || !this.policy || this.closing) {
        end = lost.error;
        break;
      }
      let release!: () => void;
      this.up = new Promise((r) => (release = r));
      try {
        end = await this.reconnect(lost.error, this.policy);
      } finally {
        this.up = undefined;
        release();
      }
      if (end || this.closing) break;
    }
    this.ended = true;
    this.endError = end;
    this.wake();
  }

  // Reads conn until it ends: undefined for a normal close (or one we asked for), else why it was lost.
  private async readLoop(conn: Connection, resumed: boolean): Promise<Lost | undefined> {
    let first = resumed;
    let held: ServerMessage | undefined; // an unavailable error: delivered only if the connection goes on
    for (;;) {
      const text = await conn.receive();
      if (text === undefined) break;
      let m: ServerMessage;
      try {
        m = parseServerMessage(text);
      } catch (e) {
        conn.abort();
        return new Lost(e as WarrenError, false);
      }
      if (m.type === "pong" && this.deliverPong(m)) continue;
      if (first) {
        first = false;
        if (sessionState(m) !== undefined) {
          this.recvSeq = Math.max(this.recvSeq, m.seq ?? 0);
          this.promptSeen(m); // the turn running now started
          continue;
        }
      }
      if (held) {
        this.push(held, resumed);
        held = undefined;
      }
      const err = messageError(m);
      if (err) this.lastErr = err;
      if (err?.code === "unavailable" && this.policy) {
        held = m;
        continue;
      }
      this.push(m, resumed);
    }
    const info = await conn.closed;
    if (this.closing) return undefined;
    const err = errorFromClose(info.code, info.reason, this.lastErr);
    if (!err) return undefined;
    const retry = !info.clean || [1001, 1006, 1012, 1013, 1014].includes(info.code) || err.code === "unavailable";
    if (held && !(retry && this.policy)) this.push(held, resumed);
    return new Lost(err, retry);
  }

  private async reconnect(lost: WarrenError, p: ReconnectOptions): Promise<Error | undefined> {
    const maxAttempts = p.maxAttempts ?? 16;
    const deadline = Date.now() + (p.timeoutMs ?? 120000);
    const lo = p.minBackoffMs ?? 250;
    const hi = p.maxBackoffMs ?? 10000;
    let last: Error = lost;
    const opts: SessionOptions = { ...this.opts, sessionId: this.id };
    delete opts.forkSession;
    delete opts.continue;
    delete opts.resumeSessionAt;
    for (let n = 1; n <= maxAttempts; n++) {
      if (n > 1) {
        let d = lo;
        for (let i = 2; i < n && d < hi; i++) d *= 2;
        d = Math.min(d, hi);
        const ra = last instanceof WarrenError && last.code === "rate_limited" ? Number(last.details?.retry_after_seconds) : 0;
        const wait = Math.max(d / 2 + Math.random() * (d / 2), ra > 0 ? Math.min(ra, 60) * 1000 : 0);
        if (Date.now() + wait > deadline) break;
        await new Promise((r) => setTimeout(r, wait));
      }
      if (this.closing) return undefined;
      const idx = (this.cur + n) % this.edges.length;
      const edge = this.edges[idx]!;
      let conn: Connection | undefined;
      try {
        const signal = AbortSignal.timeout(p.dialTimeoutMs ?? defaultDialTimeoutMs);
        conn = await this.host.transport.connect(edge, this.host.token, signal);
        await this.handshake(conn, { ...opts, lastSeq: this.recvSeq }, true, signal);
        // The replay came before ready: the prompts it shows started are forgotten; send the others again
        // (the runner ignores those it already has; an older runner would run them twice).
        if (this.dedupes) for (const p of this.unstarted) conn.send(p.text);
        this.conn = conn;
        this.cur = idx;
        this.reconnects++;
        p.onAttempt?.({ attempt: n, edge });
        return undefined;
      } catch (e) {
        conn?.abort();
        last = e instanceof Error ? e : new Error(String(e));
        p.onAttempt?.({ attempt: n, edge, error: last });
        if (e instanceof WarrenError && !["unavailable", "timeout", "internal", "rate_limited", "concurrency_limit"].includes(e.code)) {
          return e;
        }
        if (e instanceof WarrenError && e.code === "internal" && e.message.includes("instead of")) return e;
      }
    }
    return new WarrenError("unavailable", `reconnect failed: ${last.message}`, undefined, {
      cause: last,
      closeCode: lost.closeCode,
    });
  }

  // Queues m; on a connection that replaced a lost one, drops what was received before. A tool_call
  // delivered already (the runner sends the calls still pending again after a failover, with new seqs) is
  // dropped too, so a handler runs once per call; the answer sent to it, which may have been lost with the
  // old connection, is sent again.
  private push(m: ServerMessage, dedup: boolean): void {
    const seq = m.seq ?? 0;
    if (dedup && seq > 0 && seq <= this.recvSeq) return;
    this.recvSeq = Math.max(this.recvSeq, seq);
    this.promptSeen(m);
    const call = toolCall(m);
    if (call && call.callId !== "") {
      const { first, answer } = this.calls.deliver(call.callId);
      if (!first) {
        if (answer) void this.sendMessage({ type: "tool_result", payload: { callId: call.callId, result: answer } }).catch(() => {});
        return;
      }
      if (this.tools.length) this.answer(call);
    }
    this.queue.push(m);
    this.wake();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  // Runs the handler of a declared tool and sends its answer (a call of an undeclared tool is left to the
  // application).
  private answer(call: NonNullable<ReturnType<typeof toolCall>>): void {
    for (const srv of this.tools) {
      const tool = srv.lookup(call);
      if (!tool) continue;
      // runTool does not reject. A failed send is kept (sendToolResult): a later copy of the call sends it.
      void runTool(tool, call.input, call)
        .then((res) => this.sendToolResult(call.callId, res))
        .catch(() => {});
      return;
    }
  }

  private deliverPong(m: ServerMessage): boolean {
    const ts = (m as { payload?: { timestamp?: unknown } }).payload?.timestamp;
    const done = typeof ts === "number" ? this.pings.get(ts) : undefined;
    if (!done) return false;
    this.pings.delete(ts as number);
    this.recvSeq = Math.max(this.recvSeq, m.seq ?? 0);
    if (this.queue.length === 0 && (m.seq ?? 0) > this.handedSeq) this.handedSeq = m.seq!;
    done();
    return true;
  }

  /**
   * The next server message; done once the stream has ended. After an error close it rejects with that
   * error (a WarrenError) once.
   */
  async next(signal?: AbortSignal): Promise<IteratorResult<ServerMessage, undefined>> {
    for (;;) {
      const m = this.queue.shift();
      if (m) {
        if (m.seq) this.handedSeq = m.seq;
        return { value: m, done: false };
      }
      if (this.ended) {
        if (this.endError && !this.endTaken) {
          this.endTaken = true;
          throw this.endError;
        }
        return { value: undefined, done: true };
      }
      signal?.throwIfAborted();
      let onAbort: (() => void) | undefined;
      try {
        await new Promise<void>((resolve, reject) => {
          this.waiter = resolve;
          onAbort = () => reject(signal?.reason);
          signal?.addEventListener("abort", onAbort, { once: true });
        });
      } finally {
        if (onAbort) signal?.removeEventListener("abort", onAbort);
      }
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<ServerMessage, undefined> {
    return { next: () => this.next() };
  }

  /** Sends one prompt: text, or content blocks (text, image, ...), with a fresh uuid (docs/PROTOCOL.md#prompt-identity). */
  async send(prompt: string | unknown[]): Promise<void> {
    await this.sendPrompt(prompt);
  }

  private async sendPrompt(prompt: string | unknown[]): Promise<string> {
    const uuid = newUUID();
    const msg = { type: "user", session_id: this.id, message: { role: "user", content: prompt }, parent_tool_use_id: null, uuid };
    if (this.unstarted.length >= maxUnstarted) this.unstarted.shift();
    this.unstarted.push({ uuid, text: JSON.stringify(msg) });
    try {
      await this.sendMessage(msg);
    } catch (e) {
      this.unstarted = this.unstarted.filter((p) => p.uuid !== uuid);
      throw e;
    }
    return uuid;
  }

  // Forgets the prompt m shows started (a session_info naming it) or answered (an error naming it).
  private promptSeen(m: ServerMessage): void {
    if (this.unstarted.length === 0) return;
    const id = promptOf(m);
    if (id !== undefined) this.unstarted = this.unstarted.filter((p) => p.uuid !== id);
  }

  /**
   * Sends prompt, with a fresh uuid, and yields the messages of its turn, the messages queued before it
   * first, ending with the turn's result. A turn that ends without one (interrupted, or failed with an
   * error message) ends after the session_info that reports the session ready again, or throws the error
   * (a WarrenError). A runner that echoes prompt uuids names the prompt of each turn in its session_info
   * messages and errors: messages naming another prompt (an earlier turn's late result or error) are
   * yielded and do not end it. With one that names none, the turn is the one a session_info reports running
   * after the prompt was sent, and a result queued before it does not end it. After a reconnect, a prompt
   * whose turn had not started is sent again (the runner runs it once). Breaking out leaves the rest of the
   * turn queued.
   */
  async *prompt(prompt: string | unknown[], signal?: AbortSignal): AsyncGenerator<ServerMessage, void, undefined> {
    const own = await this.sendPrompt(prompt);
    const mine = (m: ServerMessage) => {
      const id = promptOf(m);
      return id === undefined || id === own;
    };
    let busy = false;
    for (;;) {
      const r = await this.next(signal);
      if (r.done) throw new SessionClosedError("warren: the session ended before the turn did");
      const m = r.value;
      const err = messageError(m);
      if (err && mine(m)) throw err;
      yield m;
      const st = sessionState(m);
      if (st === "processing" || st === "waiting_tool") busy = mine(m);
      // What came before this turn started (an interrupted turn's late result) does not end it.
      else if (busy && ((st && mine(m)) || m.type === "result")) return;
    }
  }

  /** Stops the running turn (and drops queued prompts). */
  interrupt(): Promise<void> {
    return this.sendMessage({ type: "control", payload: { action: "interrupt" } });
  }

  /** Answers a tool_call. The answer is kept a while: sent again if the call comes back after a reconnect. */
  sendToolResult(callId: string, result: ToolResult): Promise<void> {
    this.calls.answer(callId, result);
    return this.sendMessage({ type: "tool_result", payload: { callId, result } });
  }

  /** Answers m with the handler of the tool it calls when one of servers declares it: true when it did. */
  async handleToolCall(m: ServerMessage, ...servers: ToolServer[]): Promise<boolean> {
    const call = toolCall(m);
    if (!call) return false;
    for (const srv of servers) {
      const tool = srv.lookup(call);
      if (tool) {
        await this.sendToolResult(call.callId, await runTool(tool, call.input, call));
        return true;
      }
    }
    return false;
  }

  /** The round trip of a ping to the server, in milliseconds. */
  async ping(): Promise<number> {
    const start = performance.now();
    const ts = Math.max(Date.now(), this.lastPing + 1);
    this.lastPing = ts;
    const pong = new Promise<void>((r) => this.pings.set(ts, r));
    try {
      await this.sendMessage({ type: "ping", payload: { timestamp: ts } });
      await Promise.race([pong, this.finished.then(() => Promise.reject(this.endError ?? new SessionClosedError()))]);
      return performance.now() - start;
    } finally {
      this.pings.delete(ts);
    }
  }

  /** Sends v, encoded as JSON, as one message; while reconnecting it waits for the new connection. */
  async sendMessage(v: unknown): Promise<void> {
    const text = JSON.stringify(v);
    if (text.length > maxFrame / 4 && new TextEncoder().encode(text).length > maxFrame) {
      throw new WarrenError("payload_too_large", `message exceeds the ${maxFrame} byte limit`);
    }
    for (let tries = 0; ; tries++) {
      while (this.up) await this.up;
      if (this.ended || this.closing) throw this.endError ?? new SessionClosedError();
      try {
        this.conn.send(text);
        return;
      } catch (e) {
        if (!this.policy || tries >= 2) throw e;
        // The connection is going: the reader reconnects; try again on the next connection.
        await Promise.race([this.finished, new Promise((r) => setTimeout(r, 50))]);
      }
    }
  }

  /** Asks the server to close the session, closes the connection and waits for the reader. */
  close(): Promise<void> {
    this.closeOnce ??= (async () => {
      if (!this.ended) {
        try {
          if (!this.up) this.conn.send(JSON.stringify({ type: "control", payload: { action: "close" } }));
        } catch {
          // already gone
        }
      }
      this.closing = true;
      this.conn.close(1000);
      const t = setTimeout(() => this.conn.abort(), closeTimeoutMs);
      await this.finished;
      clearTimeout(t);
    })();
    return this.closeOnce;
  }

  /** For `await using`: closes the session. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Drops the current connection as a network failure would (tests of reconnects). */
  dropConnection(): void {
    this.conn.abort();
  }
}

// refusalCloseWait bounds the wait for the close that follows a refusal (the edge closes right after).
const refusalCloseWait = 2000;

// err, a refusal before ready, with the close code of the close that follows it.
async function withCloseCode(conn: Connection, err: WarrenError): Promise<WarrenError> {
  const drained = (async () => {
    while ((await conn.receive()) !== undefined);
    return conn.closed;
  })();
  let timer: unknown;
  const info = await Promise.race([drained, new Promise<undefined>((r) => (timer = setTimeout(r, refusalCloseWait)))]);
  clearTimeout(timer as never);
  if (!info) return err;
  // Chromium sometimes reports a WebTransport session the edge closed with the refusal's code as lost
  // (1006) although the edge ended its stream cleanly after the error (docs/PROTOCOL.md#webtransport): the
  // session's code is the error's, by the protocol's table.
  const code = info.code === 1006 && conn.peerEnded && isCode(err.code) ? closeCodeFor(err.code) : info.code;
  return new WarrenError(err.code, err.message, err.details, { closeCode: code });
}

/** Bounds of ToolCalls (as the Go SDK's). */
export const maxDeliveredCalls = 1024; // callIds remembered
/** The prompts remembered for sending again after a reconnect (the runner queues at most 8). */
export const maxUnstarted = 64;

/** A random UUID (version 4) naming a prompt. */
export function newUUID(): string {
  const c = globalThis.crypto;
  if (typeof c.randomUUID === "function") return c.randomUUID();
  const b = c.getRandomValues(new Uint8Array(16)); // randomUUID needs a secure context in browsers
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

export const maxKeptAnswers = 32; // answers kept to send again (the runner holds at most 16 calls pending)

/**
 * The tool_call callIds a Session delivered (across its reconnects) and its latest answers, both bounded,
 * oldest forgotten first.
 */
export class ToolCalls {
  private delivered = new Set<string>(); // in delivery order
  private answers = new Map<string, ToolResult>(); // in answer order

  /** Records callId: first is false when it was delivered before, with the answer sent to it if kept. */
  deliver(callId: string): { first: boolean; answer?: ToolResult } {
    if (this.delivered.has(callId)) return { first: false, answer: this.answers.get(callId) };
    this.delivered.add(callId);
    if (this.delivered.size > maxDeliveredCalls) this.delivered.delete(this.delivered.values().next().value!);
    return { first: true };
  }

  /** Keeps the latest answer to callId. */
  answer(callId: string, result: ToolResult): void {
    this.answers.delete(callId);
    this.answers.set(callId, result);
    if (this.answers.size > maxKeptAnswers) this.answers.delete(this.answers.keys().next().value!);
  }

  /** How many callIds and answers are remembered. */
  get size(): { delivered: number; answers: number } {
    return { delivered: this.delivered.size, answers: this.answers.size };
  }
}
