// Preview URLs (docs/PROTOCOL.md#previews): a port the sandbox listens on, reachable from the internet
// through the edge over HTTP and WebSocket, at a signed URL that expires and can be revoked.

import type { Requester } from "./sandbox.js";

/** A request for a preview URL (wire.PreviewRequest). Private unless public. */
export interface PreviewRequest {
  /** 1..65535: a port a server of the sandbox listens on (its loopback). */
  port: number;
  /** Reachable by anyone with the URL, without the owner's token. */
  public?: boolean;
  /** Lifetime in seconds (default the edge's, one hour; at most its maximum). */
  ttl_seconds?: number;
}

/** A preview URL as its owner sees it (wire.Preview). */
export interface Preview {
  id: string;
  /** <port>-<id>-<sig>. */
  token: string;
  /** https://<token>.<domain>/, or <preview origin>/preview/<token>/ (warren dev: never the edge's origin). A private one opens with ?token=<JWT> once. */
  url: string;
  port: number;
  public: boolean;
  created: string;
  expires: string;
}

/** Makes a preview URL; too many live ones is a WarrenError resource_exhausted (details.max_previews). */
export async function createPreview(c: Requester, req: PreviewRequest, signal?: AbortSignal): Promise<Preview> {
  const r = await c.request("POST", "/v1/sandbox/previews", { body: JSON.stringify(req), headers: { "Content-Type": "application/json" }, signal });
  return (await r.json()) as Preview;
}

/** The user's live preview URLs, oldest first. */
export async function listPreviews(c: Requester, signal?: AbortSignal): Promise<Preview[]> {
  const r = await c.request("GET", "/v1/sandbox/previews", { signal });
  const v = (await r.json()) as { previews?: Preview[] };
  return Array.isArray(v.previews) ? v.previews : [];
}

/** Revokes a preview URL at once, at every edge; an unknown id is a WarrenError not_found. */
export async function revokePreview(c: Requester, id: string, signal?: AbortSignal): Promise<void> {
  await c.request("DELETE", "/v1/sandbox/previews/" + encodeURIComponent(id), { signal });
}
