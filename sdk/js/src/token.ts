// Minting tokens on a customer's backend (Node): HS256 JWTs with Warren's claims (docs/PROTOCOL.md#tokens),
// interoperable with any JWT library. Not for browsers: the issuer secret never leaves the backend.

import { createHmac } from "node:crypto";

import { WarrenError } from "./errors.js";

/** The budget claim. */
export interface BudgetClaim {
  ai?: number;
  compute?: number;
  window?: "hour" | "day" | "week" | "month" | "lifetime";
  /** RFC 3339 (a Date is written as one); required unless window is lifetime. */
  windowStart?: string | Date;
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

// The latest NumericDate the edge accepts: 9999-12-31T23:59:59Z.
const maxNumericDate = 253402300799;

// A template name, as the edge verifies the template claim.
const templateRe = /^[a-z0-9][a-z0-9._-]{0,63}$/;

const textSecretRe = /^wsk_[A-Za-z0-9]{43,256}$/;

// An RFC 3339 time as the edge's JSON decoder reads one (upper-case T and Z, seconds, optional fraction).
const rfc3339Re = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:Z|([+-])(\d{2}):(\d{2}))$/;

// The claims the edge decodes by name; any other top-level claim is passed through.
const budgetFields = new Set(["ai", "compute", "window", "windowStart"]);
const permissionFields = new Set(["tools", "blockedTools", "maxTurns", "model"]);
const windows = new Set(["hour", "day", "week", "month", "lifetime"]);

const bad = (message: string) => new WarrenError("invalid_argument", message);

// A name as the edge verifies one: 1 to 256 bytes of UTF-8 without control or format characters.
function validName(v: unknown): v is string {
  return typeof v === "string" && v !== "" && !/[\p{Cc}\p{Cf}\p{Cs}]/u.test(v) && Buffer.byteLength(v) <= 256;
}

function checkName(what: string, v: unknown): void {
  if (!validName(v)) throw bad(`${what} must be 1 to 256 bytes without control characters`);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

// absent: a claim left out, undefined or null, which the edge reads as not given.
const absent = (v: unknown) => v === undefined || v === null;

function checkDate(what: string, v: unknown): void {
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0 || v > maxNumericDate) {
    throw bad(`${what} must be a number of Unix seconds from 0 to ${maxNumericDate}`);
  }
}

// The Unix seconds of an RFC 3339 time; NaN when it is not one (a day that does not exist included).
function rfc3339Seconds(s: string): number {
  const m = rfc3339Re.exec(s);
  if (!m) return NaN;
  const [y, mo, d, h, mi, sec] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const t = new Date(0);
  t.setUTCFullYear(y, mo - 1, d);
  t.setUTCHours(h, mi, sec);
  if (t.getUTCFullYear() !== y || t.getUTCMonth() !== mo - 1 || t.getUTCDate() !== d || h > 23 || mi > 59 || sec > 59) return NaN;
  const off = m[7] ? Number(m[8]) * 60 + Number(m[9]) : 0;
  if (m[7] && (Number(m[8]) > 23 || Number(m[9]) > 59)) return NaN;
  return t.getTime() / 1000 - (m[7] === "-" ? -off : off) * 60;
}

function checkBudget(b: unknown): void {
  if (!isObject(b)) throw bad("budget must be an object");
  for (const k of Object.keys(b)) if (!budgetFields.has(k) && b[k] !== undefined) throw bad(`budget has an unknown field ${JSON.stringify(k)}`);
  for (const k of ["ai", "compute"] as const) {
    if (!absent(b[k]) && (!Number.isSafeInteger(b[k]) || (b[k] as number) < 0)) throw bad(`budget.${k} must be a whole number, not negative`);
  }
  if (typeof b.window !== "string" || !windows.has(b.window)) throw bad("budget.window must be one of hour, day, week, month, lifetime");
  let start = b.windowStart;
  if (start instanceof Date) start = start.toJSON();
  if (absent(start)) {
    if (b.window !== "lifetime") throw bad("budget.windowStart is required unless budget.window is lifetime");
    return;
  }
  const sec = typeof start === "string" ? rfc3339Seconds(start) : NaN;
  if (Number.isNaN(sec)) throw bad("budget.windowStart must be an RFC 3339 time such as 2026-01-02T00:00:00Z");
  if (sec < 0 || sec > maxNumericDate) throw bad("budget.windowStart is out of range");
}

function checkPermissions(p: unknown): void {
  if (!isObject(p)) throw bad("permissions must be an object");
  for (const k of Object.keys(p)) if (!permissionFields.has(k) && p[k] !== undefined) throw bad(`permissions has an unknown field ${JSON.stringify(k)}`);
  for (const k of ["tools", "blockedTools"] as const) {
    const list = p[k];
    if (!absent(list) && (!Array.isArray(list) || !list.every(validName))) {
      throw bad(`permissions.${k} must be a list of tool names of 1 to 256 bytes without control characters`);
    }
  }
  if (!absent(p.maxTurns) && (!Number.isSafeInteger(p.maxTurns) || (p.maxTurns as number) < 0)) {
    throw bad("permissions.maxTurns must be a whole number, not negative");
  }
  if (!absent(p.model) && p.model !== "" && !validName(p.model)) throw bad("permissions.model must be at most 256 bytes without control characters");
}

/**
 * checkClaims refuses claims the edge would refuse (internal/token/claims.go), before anything is signed:
 * iss and sub, aud, the dates, budget (a window; windowStart unless lifetime), permissions, sdkConfig and
 * template. It does not compare the times with a clock: an expired token can be minted (for a test).
 */
function checkClaims(claims: Claims): void {
  checkName("iss", claims.iss);
  checkName("sub", claims.sub);
  const aud = claims.aud;
  if (!absent(aud) && !(typeof aud === "string" ? validName(aud) : Array.isArray(aud) && aud.every(validName))) {
    throw bad("aud must be a name or a list of names of 1 to 256 bytes without control characters");
  }
  for (const k of ["nbf", "iat"] as const) if (!absent(claims[k])) checkDate(k, claims[k]);
  if (!absent(claims.budget)) checkBudget(claims.budget);
  if (!absent(claims.permissions)) checkPermissions(claims.permissions);
  if (!absent(claims.sdkConfig) && !isObject(claims.sdkConfig)) throw bad("sdkConfig must be an object");
  if (!absent(claims.template) && (typeof claims.template !== "string" || !templateRe.test(claims.template))) {
    throw bad("template must be 1 to 64 bytes of a-z, 0-9, '.', '_' or '-', starting with a letter or digit");
  }
}

const b64url = (b: Buffer | string) => Buffer.from(b).toString("base64url");

function secretKey(secret: unknown): Buffer {
  let key: Buffer;
  if (typeof secret === "string") {
    if (secret.startsWith("wsk_") && !textSecretRe.test(secret)) throw bad("a text secret is wsk_ and 43 to 256 characters of [A-Za-z0-9]");
    key = Buffer.from(secret, "utf8");
  } else if (secret instanceof Uint8Array) {
    key = Buffer.from(secret);
  } else {
    throw bad("the secret must be a string (wsk_…) or bytes");
  }
  if (key.length === 0) throw bad("empty secret");
  return key;
}

/**
 * mintToken signs claims with the issuer's secret (HS256). A text secret (`wsk_…`, what
 * POST /v1/issuers/{iss}/keys answers) is used as its UTF-8 bytes, as every JWT library uses a string
 * secret; pass a legacy base64 secret decoded (Buffer.from(s, "base64")). The result verifies with any
 * JWT library and at the edge.
 */
export function mintToken(secret: string | Uint8Array, claims: Claims, opts: MintOptions = {}): string {
  const key = secretKey(secret);
  if (!isObject(claims as unknown)) throw bad("claims must be an object");
  if (!isObject(opts as unknown)) throw bad("options must be an object");
  checkClaims(claims);
  if (opts.kid !== undefined) checkName("kid", opts.kid);
  const ttl = opts.expiresInSeconds ?? 3600;
  if (!Number.isSafeInteger(ttl) || ttl <= 0) throw bad("expiresInSeconds must be a whole number above 0");
  const body: Claims = { ...claims, exp: claims.exp ?? Math.floor(Date.now() / 1000) + ttl };
  if (!Number.isInteger(body.exp)) throw bad("exp must be a whole number of Unix seconds");
  checkDate("exp", body.exp);
  const header = opts.kid !== undefined ? { alg: "HS256", typ: "JWT", kid: opts.kid } : { alg: "HS256", typ: "JWT" };
  let payload: string;
  try {
    payload = JSON.stringify(body);
  } catch (e) {
    throw new WarrenError("invalid_argument", `claims are not JSON: ${String(e)}`, undefined, { cause: e });
  }
  const signing = `${b64url(JSON.stringify(header))}.${b64url(payload)}`;
  const tok = `${signing}.${createHmac("sha256", key).update(signing).digest("base64url")}`;
  if (tok.length > maxTokenBytes) throw new WarrenError("payload_too_large", `token of ${tok.length} bytes exceeds the ${maxTokenBytes} byte limit`);
  return tok;
}
