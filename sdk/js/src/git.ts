// Git in the sandbox (docs/PROTOCOL.md#git): the git binary run inside the sandbox on a repository of the
// workspace. Paths are repository directories relative to the workspace root ("" is the root).

import type { Requester } from "./sandbox.js";

/** What init, clone, commit, branch and checkout answer (wire.GitHead). */
export interface GitHead {
  path: string;
  branch?: string; // absent when detached
  commit?: string; // absent before the first commit
}

/** A clone's credential: used for that clone only, never stored in the sandbox. */
export interface GitCredential {
  username?: string; // default x-access-token
  password: string;
}

export interface GitCloneRequest {
  url: string; // https://, http:// or git://, without credentials
  path: string;
  branch?: string;
  depth?: number;
  credential?: GitCredential;
  timeoutMs?: number;
}

export interface GitCommitRequest {
  path?: string;
  message: string;
  all?: boolean;
  paths?: string[];
  authorName?: string;
  authorEmail?: string;
  allowEmpty?: boolean;
}

export interface GitStatusEntry {
  path: string;
  index: string;
  worktree: string;
  from?: string;
}

export interface GitStatus {
  branch?: string;
  commit?: string;
  upstream?: string;
  ahead?: number;
  behind?: number;
  clean: boolean;
  entries: GitStatusEntry[];
  truncated?: boolean;
}

export interface GitLogEntry {
  commit: string;
  parents?: string[];
  authorName: string;
  authorEmail: string;
  time: number; // Unix seconds
  subject: string;
}

export interface GitLog {
  commits: GitLogEntry[];
  truncated?: boolean;
}

export interface GitDiff {
  diff: string;
  truncated?: boolean;
}

/** Git in the sandbox: Sandbox.git. */
export class Git {
  constructor(private c: Requester) {}

  private async post(op: string, body: object, signal?: AbortSignal): Promise<GitHead> {
    const r = await this.c.request("POST", `/v1/sandbox/git/${op}`, { body: JSON.stringify(body), headers: { "Content-Type": "application/json" }, signal });
    return (await r.json()) as GitHead;
  }

  private async get<T>(op: string, query: Record<string, string | undefined>, signal?: AbortSignal): Promise<T> {
    const q: Record<string, string> = {};
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== "") q[k] = v;
    const r = await this.c.request("GET", `/v1/sandbox/git/${op}`, { query: q, signal });
    return (await r.json()) as T;
  }

  /** git init at path (made if missing). */
  init(req: { path?: string; branch?: string } = {}, signal?: AbortSignal): Promise<GitHead> {
    return this.post("init", req, signal);
  }

  /** Clones an https/http/git URL into req.path, under the sandbox's egress policy. */
  clone(req: GitCloneRequest, signal?: AbortSignal): Promise<GitHead> {
    return this.post("clone", req, signal);
  }

  /** Stages (all, or paths) and commits; the author is the token's user unless given. */
  commit(req: GitCommitRequest, signal?: AbortSignal): Promise<GitHead> {
    return this.post("commit", req, signal);
  }

  /** A new branch at start (default HEAD); HEAD does not move. */
  branch(req: { path?: string; name: string; start?: string }, signal?: AbortSignal): Promise<GitHead> {
    return this.post("branch", req, signal);
  }

  /** Checks out ref, or with create a new branch ref at start. */
  checkout(req: { path?: string; ref: string; create?: boolean; start?: string }, signal?: AbortSignal): Promise<GitHead> {
    return this.post("checkout", req, signal);
  }

  status(path = "", signal?: AbortSignal): Promise<GitStatus> {
    return this.get("status", { path }, signal);
  }

  /** The working tree (or the index, staged) against the index (or base). */
  diff(path = "", opts: { base?: string; staged?: boolean } = {}, signal?: AbortSignal): Promise<GitDiff> {
    return this.get("diff", { path, base: opts.base, staged: opts.staged ? "true" : undefined }, signal);
  }

  /** Commits reachable from ref (default HEAD), newest first, at most limit (default 100). */
  log(path = "", opts: { ref?: string; limit?: number } = {}, signal?: AbortSignal): Promise<GitLog> {
    return this.get("log", { path, ref: opts.ref, limit: opts.limit === undefined ? undefined : String(opts.limit) }, signal);
  }

  /** A git bundle of ref (default HEAD) with the commits since base (none: the whole history). */
  async bundle(path = "", opts: { base?: string; ref?: string } = {}, signal?: AbortSignal): Promise<Uint8Array> {
    const query: Record<string, string> = { path };
    if (opts.base) query.base = opts.base;
    if (opts.ref) query.ref = opts.ref;
    const r = await this.c.request("GET", "/v1/sandbox/git/bundle", { query, signal });
    return new Uint8Array(await r.arrayBuffer());
  }
}
