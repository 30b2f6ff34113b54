// The sandbox REST API (docs/PROTOCOL.md#sandbox-api): exec, streamed exec and files, with the session's
// token.

import { WarrenError } from "./errors.js";
import * as files from "./files.js";
import { type Preview, type PreviewRequest, createPreview, listPreviews, revokePreview } from "./preview.js";
import { SSEParser } from "./sse.js";
import { Git } from "./git.js";

/** An exec request (wire.ExecRequest). Without args the command runs under /bin/sh -c. */
export interface ExecRequest {
  command: string;
  args?: string[];
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  timeoutMs?: number;
}

/** An exec result (wire.ExecResult): a nonzero exit is a result, not an error. */
export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  durationMs: number;
  truncated?: boolean;
  timedOut?: boolean;
  oomKilled?: boolean;
}

/** One event of a streamed exec: output as it comes, then the exit (an ExecResult without output). */
export type ExecEvent = { type: "stdout" | "stderr"; data: string } | { type: "exit"; result: ExecResult };

/** One entry of a directory listing (wire.FileList). */
export interface FileInfo {
  name: string;
  path: string;
  type: string;
  size: number;
  mode: string | number;
  modTime: string;
}

// What the sandbox needs of its client.
export interface Requester {
  request(method: string, path: string, init?: { query?: Record<string, string>; body?: BodyInit; headers?: Record<string, string>; signal?: AbortSignal }): Promise<Response>;
}

/** The sandbox of the token's user (started on demand). */
export class Sandbox {
  /** Git in the sandbox (docs/PROTOCOL.md#git). */
  readonly git: Git;

  constructor(private c: Requester) {
    this.git = new Git(c);
  }

  /** Runs a command and waits for its result. */
  async exec(req: ExecRequest, signal?: AbortSignal): Promise<ExecResult> {
    const r = await this.c.request("POST", "/v1/sandbox/exec", { body: JSON.stringify(req), headers: { "Content-Type": "application/json" }, signal });
    return (await r.json()) as ExecResult;
  }

  /** Runs a command and yields its output as it comes, then its exit. A server error event throws it. */
  async *execStream(req: ExecRequest, signal?: AbortSignal): AsyncGenerator<ExecEvent, void, undefined> {
    const r = await this.c.request("POST", "/v1/sandbox/exec", {
      body: JSON.stringify(req),
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      signal,
    });
    if (!r.body) throw new WarrenError("internal", "streamed exec: no body");
    const parser = new SSEParser();
    const dec = new TextDecoder();
    const reader = r.body.getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        const evs = parser.push(done ? dec.decode() : dec.decode(value, { stream: true }));
        for (const ev of evs) {
          const out = parseExecEvent(ev.event, ev.data);
          if (out === undefined) continue;
          yield out;
          if (out.type === "exit") return;
        }
        if (done) throw new WarrenError("unavailable", "streamed exec ended before the command's exit");
      }
    } finally {
      void reader.cancel().catch(() => {});
    }
  }

  /** A file's bytes. */
  async readFile(path: string, signal?: AbortSignal): Promise<Uint8Array> {
    const r = await this.c.request("GET", "/v1/sandbox/files", { query: { path }, signal });
    return new Uint8Array(await r.arrayBuffer());
  }

  /** A file's text (UTF-8). */
  async readText(path: string, signal?: AbortSignal): Promise<string> {
    return new TextDecoder().decode(await this.readFile(path, signal));
  }

  /** Writes a file atomically (parents created unless parents is false). */
  async writeFile(path: string, data: string | Uint8Array | Blob, opts: { parents?: boolean; signal?: AbortSignal } = {}): Promise<{ path: string; size: number }> {
    const query: Record<string, string> = { path };
    if (opts.parents === false) query.parents = "false";
    const r = await this.c.request("PUT", "/v1/sandbox/files", { query, body: data as BodyInit, signal: opts.signal });
    return (await r.json()) as { path: string; size: number };
  }

  /** The entries of a directory, sorted by name. */
  async list(path = ".", signal?: AbortSignal): Promise<FileInfo[]> {
    const r = await this.c.request("GET", "/v1/sandbox/files/list", { query: { path }, signal });
    const v = (await r.json()) as { entries?: FileInfo[] };
    return Array.isArray(v.entries) ? v.entries : [];
  }

  /** Makes a preview URL of a port of the sandbox (docs/PROTOCOL.md#previews). */
  createPreview(req: PreviewRequest, signal?: AbortSignal): Promise<Preview> {
    return createPreview(this.c, req, signal);
  }

  /** The user's live preview URLs, oldest first. */
  previews(signal?: AbortSignal): Promise<Preview[]> {
    return listPreviews(this.c, signal);
  }

  /** Revokes a preview URL at once, at every edge. */
  revokePreview(id: string, signal?: AbortSignal): Promise<void> {
    return revokePreview(this.c, id, signal);
  }

  /** Removes a file, or a directory with recursive. */
  async remove(path: string, opts: { recursive?: boolean; signal?: AbortSignal } = {}): Promise<void> {
    const query: Record<string, string> = { path };
    if (opts.recursive) query.recursive = "true";
    await this.c.request("DELETE", "/v1/sandbox/files", { query, signal: opts.signal });
  }

  /** Describes a file, directory or symlink (a symlink is not followed). */
  stat(path: string, signal?: AbortSignal): Promise<FileInfo> {
    return files.stat(this.c, path, signal);
  }

  /** Makes a directory; with parents, mkdir -p (missing parents made, an existing directory is fine). */
  mkdir(path: string, opts: { parents?: boolean; signal?: AbortSignal } = {}): Promise<FileInfo> {
    return files.mkdir(this.c, path, opts);
  }

  /** Moves or renames within the workspace, atomically; answers the destination. */
  move(from: string, to: string, opts: files.MoveOptions = {}): Promise<FileInfo> {
    return files.move(this.c, from, to, opts);
  }

  /** Streams length bytes of a file from offset (to the end without length): resumes a large download. */
  readRange(path: string, offset: number, length?: number, signal?: AbortSignal): Promise<ReadableStream<Uint8Array>> {
    return files.readRange(this.c, path, offset, length, signal);
  }

  /** Follows the changes under a directory (recursive, debounced): ready, then change and overflow events. */
  watch(path = ".", opts: files.WatchOptions = {}): AsyncGenerator<files.WatchEvent, void, undefined> {
    return files.watch(this.c, path, opts);
  }
}

/** One server-sent event of a streamed exec; undefined for an event it does not know. */
export function parseExecEvent(event: string, data: string): ExecEvent | undefined {
  let v: unknown;
  try {
    v = JSON.parse(data);
  } catch (e) {
    throw new WarrenError("internal", `streamed exec: malformed ${event.slice(0, 32)} event`, undefined, { cause: e });
  }
  const o = typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  if (!o) throw new WarrenError("internal", `streamed exec: ${event.slice(0, 32)} event is not an object`);
  switch (event) {
    case "stdout":
    case "stderr":
      if (typeof o.data !== "string") throw new WarrenError("internal", `streamed exec: ${event} event without data`);
      return { type: event, data: o.data };
    case "exit":
      if (typeof o.exitCode !== "number") throw new WarrenError("internal", "streamed exec: exit event without exitCode");
      return { type: "exit", result: { stdout: "", stderr: "", durationMs: 0, ...(o as object), exitCode: o.exitCode } as ExecResult };
    case "error":
      throw WarrenError.fromPayload(o);
    default:
      return undefined;
  }
}
