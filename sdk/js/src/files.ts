// The file API beyond read, write, list and remove (docs/PROTOCOL.md#files): stat, mkdir, move, ranged
// reads and watch, over the sandbox's Requester.

import { WarrenError } from "./errors.js";
import type { FileInfo, Requester } from "./sandbox.js";
import { SSEParser } from "./sse.js";

/** Options of move (wire.FileMoveRequest). */
export interface MoveOptions {
  /** Replace what is at the destination (else conflict). */
  overwrite?: boolean;
  /** Make the destination's missing parent directories. */
  parents?: boolean;
  signal?: AbortSignal;
}

/** Options of watch. */
export interface WatchOptions {
  /** Watch subdirectories, and new ones (default true). */
  recursive?: boolean;
  /** The window in which changes are coalesced, 10 to 5000 ms (default the server's 50). */
  debounceMs?: number;
  signal?: AbortSignal;
}

/** A change (wire.FileEvent): the operations seen on path during one debounce window, in order. */
export interface FileEvent {
  path: string;
  ops: Array<"create" | "write" | "remove" | "rename" | "chmod">;
  dir?: boolean;
}

/** The ready event (wire.FileWatchReady). */
export interface FileWatchReady {
  path: string;
  recursive: boolean;
  dirs: number;
  debounceMs: number;
}

/** Changes were lost (wire.FileWatchOverflow): list again. */
export interface FileWatchOverflow {
  reason: "queue" | "kernel" | "dirs";
  dropped: number;
  message: string;
}

/** One event of a watch. */
export type WatchEvent =
  | { type: "ready"; ready: FileWatchReady }
  | { type: "change"; change: FileEvent }
  | { type: "overflow"; overflow: FileWatchOverflow };

export async function stat(c: Requester, path: string, signal?: AbortSignal): Promise<FileInfo> {
  const r = await c.request("GET", "/v1/sandbox/files/stat", { query: { path }, signal });
  return (await r.json()) as FileInfo;
}

export async function mkdir(c: Requester, path: string, opts: { parents?: boolean; signal?: AbortSignal } = {}): Promise<FileInfo> {
  const query: Record<string, string> = { path };
  if (opts.parents) query.parents = "true";
  const r = await c.request("POST", "/v1/sandbox/files/mkdir", { query, signal: opts.signal });
  return (await r.json()) as FileInfo;
}

export async function move(c: Requester, from: string, to: string, opts: MoveOptions = {}): Promise<FileInfo> {
  const body = JSON.stringify({ from, to, ...(opts.overwrite ? { overwrite: true } : {}), ...(opts.parents ? { parents: true } : {}) });
  const r = await c.request("POST", "/v1/sandbox/files/move", { body, headers: { "Content-Type": "application/json" }, signal: opts.signal });
  return (await r.json()) as FileInfo;
}

/** length bytes of a file from offset (to the end when length is omitted), streamed. */
export async function readRange(c: Requester, path: string, offset: number, length?: number, signal?: AbortSignal): Promise<ReadableStream<Uint8Array>> {
  if (!Number.isSafeInteger(offset) || offset < 0) throw new WarrenError("invalid_argument", `bad offset ${offset}`);
  const range = `bytes=${offset}-${length !== undefined && length > 0 ? offset + length - 1 : ""}`;
  const r = await c.request("GET", "/v1/sandbox/files", { query: { path }, headers: { Range: range }, signal });
  if (offset > 0 && r.status !== 206) throw new WarrenError("internal", `read ${path} with ${range}: answered ${r.status}, not a part`);
  if (!r.body) throw new WarrenError("internal", `read ${path}: no body`);
  return r.body;
}

/**
 * Follows the changes under a directory: a ready event first, then change and overflow events. It ends
 * when the watched directory is removed or moved (after its change event); stopping the iteration or the
 * signal closes the stream and frees the watch.
 */
export async function* watch(c: Requester, path = ".", opts: WatchOptions = {}): AsyncGenerator<WatchEvent, void, undefined> {
  const query: Record<string, string> = { path };
  if (opts.recursive === false) query.recursive = "false";
  if (opts.debounceMs !== undefined) query.debounceMs = String(opts.debounceMs);
  const r = await c.request("GET", "/v1/sandbox/files/watch", { query, headers: { Accept: "text/event-stream" }, signal: opts.signal });
  if (!r.body) throw new WarrenError("internal", "watch: no body");
  const parser = new SSEParser();
  const dec = new TextDecoder();
  const reader = r.body.getReader();
  let root: string | undefined;
  let rootGone = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      for (const ev of parser.push(done ? dec.decode() : dec.decode(value, { stream: true }))) {
        const out = parseWatchEvent(ev.event, ev.data);
        if (out === undefined) continue;
        if (out.type === "ready") root = out.ready.path;
        if (out.type === "change" && out.change.path === root) rootGone = true;
        yield out;
      }
      if (done) {
        if (rootGone) return;
        throw new WarrenError("unavailable", "watch stream ended");
      }
    }
  } finally {
    void reader.cancel().catch(() => {});
  }
}

/** One server-sent event of a watch; undefined for an event it does not know. Malformed data throws. */
export function parseWatchEvent(event: string, data: string): WatchEvent | undefined {
  if (event !== "ready" && event !== "change" && event !== "overflow") return undefined;
  let v: unknown;
  try {
    v = JSON.parse(data);
  } catch (e) {
    throw new WarrenError("internal", `watch: malformed ${event} event`, undefined, { cause: e });
  }
  const o = typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  if (!o) throw new WarrenError("internal", `watch: ${event} event is not an object`);
  switch (event) {
    case "ready":
      if (typeof o.path !== "string") throw new WarrenError("internal", "watch: ready event without path");
      return { type: "ready", ready: o as unknown as FileWatchReady };
    case "change":
      if (typeof o.path !== "string" || !Array.isArray(o.ops) || !o.ops.every((x) => typeof x === "string")) {
        throw new WarrenError("internal", "watch: change event without path or ops");
      }
      return { type: "change", change: o as unknown as FileEvent };
    default:
      if (typeof o.reason !== "string") throw new WarrenError("internal", "watch: overflow event without reason");
      return { type: "overflow", overflow: o as unknown as FileWatchOverflow };
  }
}
