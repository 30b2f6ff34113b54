// Minting tokens on a customer's backend (Node): HS256 JWTs with Warren's claims (docs/PROTOCOL.md#tokens),
// interoperable with any JWT library. Not for browsers: the issuer secret never leaves the backend.

import { createHmac } from "node:crypto";

import { WarrenError } from "./errors.js";

/** The budget claim. */
export interface BudgetClaim {
  ai?: number;
  compute?: number;
  window?: "hour" | "day" | "week" | "month" | "lifetime";
  windowStart?: string;
}

/** The permissions claim. */
export interface PermissionsClaim {
  tools?: string[];
  blockedTools?: string[];
  maxTurns?: number;
  model?: string;
}

/** The claims of a Warren token. */
export interface Claims {
  /** Issuer (project) id. */
  iss: string;
  /** End-user id. */
  sub: string;
  /** Expiry, Unix seconds; default: now + expiresInSeconds. */
  exp?: number;
  iat?: number;
  nbf?: number;
  aud?: string | string[];
  budget?: BudgetClaim;
  permissions?: PermissionsClaim;
  /** Session options that replace the client's. */
  sdkConfig?: Record<string, unknown>;
  /**
   * The workspace template a NEW sandbox of this user starts from (`warren deploy -name`); default: the
   * runner's ("default"). It has no effect on a sandbox that already exists.
   */
  template?: string;
  [claim: string]: unknown;
}

export interface MintOptions {
  /** The key id (`<issuer>-v<version>`), put in the header as kid. */
  kid?: string;
  /** Lifetime when the claims have no exp (default 3600). */
  expiresInSeconds?: number;
}

/** The largest token an edge accepts. */
export const maxTokenBytes = 8 << 10;

// A template name, as the edge verifies the template claim.
const templateRe = /^[a-z0-9][a-z0-9._-]{0,63}$/;

const textSecretRe = /^wsk_[A-Za-z0-9]{43,256}$/;

function checkName(what: string, v: unknown): void {
  // 1 to 256 bytes without control characters, as the edge verifies.
  if (typeof v !== "string" || v === "" || Buffer.byteLength(v) > 256 || /\p{Cc}/u.test(v)) {
    throw new WarrenError("invalid_argument", `${what} must be 1 to 256 bytes without control characters`);
  }
}

const b64url = (b: Buffer | string) => Buffer.from(b).toString("base64url");

/**
 * mintToken signs claims with the issuer's secret (HS256). A text secret (`wsk_…`, what
 * POST /v1/issuers/{iss}/keys answers) is used as its UTF-8 bytes, as every JWT library uses a string
 * secret; pass a legacy base64 secret decoded (Buffer.from(s, "base64")). The result verifies with any
 * JWT library and at the edge.
 */
export function mintToken(secret: string | Uint8Array, claims: Claims, opts: MintOptions = {}): string {
  let key: Buffer;
  if (typeof secret === "string") {
    if (secret.startsWith("wsk_") && !textSecretRe.test(secret)) {
      throw new WarrenError("invalid_argument", "a text secret is wsk_ and 43 to 256 characters of [A-Za-z0-9]");
    }
    key = Buffer.from(secret, "utf8");
  } else {
    key = Buffer.from(secret);
  }
  if (key.length === 0) throw new WarrenError("invalid_argument", "empty secret");
  checkName("iss", claims.iss);
  checkName("sub", claims.sub);
  if (opts.kid !== undefined) checkName("kid", opts.kid);
  if (claims.template !== undefined && (typeof claims.template !== "string" || !templateRe.test(claims.template))) {
    throw new WarrenError("invalid_argument", "template must be 1 to 64 bytes of a-z, 0-9, '.', '_' or '-', starting with a letter or digit");
  }
  const now = Math.floor(Date.now() / 1000);
  const body: Claims = { ...claims, exp: claims.exp ?? now + (opts.expiresInSeconds ?? 3600) };
  if (!Number.isInteger(body.exp) || body.exp! < 0) throw new WarrenError("invalid_argument", "exp must be a whole number of Unix seconds");
  const header = opts.kid !== undefined ? { alg: "HS256", typ: "JWT", kid: opts.kid } : { alg: "HS256", typ: "JWT" };
  const signing = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(body))}`;
  const tok = `${signing}.${createHmac("sha256", key).update(signing).digest("base64url")}`;
  if (tok.length > maxTokenBytes) throw new WarrenError("payload_too_large", `token of ${tok.length} bytes exceeds the ${maxTokenBytes} byte limit`);
  return tok;
}
