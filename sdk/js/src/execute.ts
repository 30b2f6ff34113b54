// One-shot tasks (docs/PROTOCOL.md#tasks): a prompt the agent runs to completion in the user's sandbox, its
// result, the files it changed and its cost, fetched later by id; and the verification of task webhooks.

import type { Code } from "./errors.js";
import type { Cost } from "./events.js";
import type { Requester } from "./sandbox.js";
import type { SessionOptions } from "./session.js";

/** A task's status. */
export type TaskStatus = "queued" | "running" | "succeeded" | "failed";

/** One workspace path a task changed. */
export interface FileChange {
  path: string;
  change: "created" | "modified" | "deleted";
}

/** A one-shot task (wire.TaskOf). */
export interface Task {
  id: string;
  status: TaskStatus;
  prompt: string;
  sessionId?: string;
  idempotencyKey?: string;
  createdAt: string;
  startedAt?: string;
  completedAt?: string;
  /** The agent's final text. */
  result?: string;
  subtype?: string;
  numTurns?: number;
  cost?: Cost;
  totalCostUsd: number;
  /** The workspace paths created, modified or deleted while the task ran, at most 1000. */
  filesChanged: FileChange[];
  filesChangedTruncated?: boolean;
  /** Why a failed task failed (budget_exceeded, timeout, ...). */
  error?: { code: Code; message: string; details?: Record<string, unknown> };
  webhook?: { url: string; delivered: boolean; attempts: number; lastError?: string };
}

/** Options of a task. */
export interface ExecuteOptions {
  /** Options of the task's fresh session (sessionId, resume, continue, lastSeq, role, mcpServers refused). */
  options?: SessionOptions;
  /** Resolve with the finished task (otherwise at once, queued or running). */
  wait?: boolean;
  /** Interrupt the task after this long (default: the deployment's, 10 minutes). */
  timeoutMs?: number;
  /** POSTed the finished task, signed with the issuer's webhook secret (verifyWebhook). */
  webhookURL?: string;
  /** A retry with the same key returns the same task instead of running it again. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

/** The one-shot tasks of the token's user. */
export class Tasks {
  constructor(private c: Requester) {}

  /** Runs prompt as a task (POST /v1/execute). A task the agent ended in error resolves with status failed. */
  async execute(prompt: string, opts: ExecuteOptions = {}): Promise<Task> {
    const body: Record<string, unknown> = { prompt };
    if (opts.options) body.options = opts.options;
    if (opts.wait) body.wait = true;
    if (opts.timeoutMs) body.timeoutMs = opts.timeoutMs;
    if (opts.webhookURL) body.webhook = { url: opts.webhookURL };
    const headers: Record<string, string> = { "Content-Type": "application/json" };
    if (opts.idempotencyKey) headers["Idempotency-Key"] = opts.idempotencyKey;
    const r = await this.c.request("POST", "/v1/execute", { body: JSON.stringify(body), headers, signal: opts.signal });
    return (await r.json()) as Task;
  }

  /** A task by id; an unknown id, or another user's, throws not_found. */
  async get(id: string, signal?: AbortSignal): Promise<Task> {
    const r = await this.c.request("GET", "/v1/execute/" + encodeURIComponent(id), { signal });
    return (await r.json()) as Task;
  }

  /** The user's newest tasks first (limit 1 to 100; default 20). */
  async list(limit?: number, signal?: AbortSignal): Promise<Task[]> {
    const query = limit ? { limit: String(limit) } : undefined;
    const r = await this.c.request("GET", "/v1/execute", { query, signal });
    const v = (await r.json()) as { tasks?: Task[] };
    return Array.isArray(v.tasks) ? v.tasks : [];
  }
}

/** Headers of a task webhook. */
export const webhookHeaders = {
  id: "warren-webhook-id",
  timestamp: "warren-webhook-timestamp",
  signature: "warren-webhook-signature",
} as const;

/**
 * Verifies a task webhook with the issuer's webhook secret and returns its task: the signature header must
 * be "v1=" and the hex HMAC-SHA256 of the timestamp header, ".", and the raw body, and the timestamp within
 * toleranceSeconds (default 300) of now. Throws an Error otherwise. Uses WebCrypto (Node 20+, browsers).
 */
export async function verifyWebhook(
  secret: string,
  headers: Headers | Record<string, string | string[] | undefined>,
  body: string | Uint8Array,
  opts: { toleranceSeconds?: number; now?: Date } = {},
): Promise<Task> {
  const get = (name: string): string => {
    if (headers instanceof Headers) return headers.get(name) ?? "";
    for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() === name) return (Array.isArray(v) ? v[0] : v) ?? "";
    return "";
  };
  const ts = get(webhookHeaders.timestamp);
  if (!/^[0-9]{1,15}$/.test(ts)) throw new Error("warren webhook: bad timestamp");
  const now = (opts.now ?? new Date()).getTime() / 1000;
  if (Math.abs(now - Number(ts)) > (opts.toleranceSeconds ?? 300)) throw new Error("warren webhook: timestamp outside the tolerance");
  const sig = get(webhookHeaders.signature);
  if (!/^v1=[0-9a-f]{64}$/.test(sig)) throw new Error("warren webhook: malformed signature");
  const raw = typeof body === "string" ? new TextEncoder().encode(body) : body;
  const enc = new TextEncoder();
  const key = await crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
  const signed = new Uint8Array(ts.length + 1 + raw.length);
  signed.set(enc.encode(ts + "."), 0);
  signed.set(raw, ts.length + 1);
  const mac = new Uint8Array(32);
  for (let i = 0; i < 32; i++) mac[i] = parseInt(sig.slice(3 + 2 * i, 5 + 2 * i), 16);
  if (!(await crypto.subtle.verify("HMAC", key, mac, signed))) throw new Error("warren webhook: signature invalid");
  return JSON.parse(new TextDecoder().decode(raw)) as Task;
}
