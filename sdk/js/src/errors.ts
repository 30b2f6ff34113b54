// Errors of the Warren protocol (docs/PROTOCOL.md#errors): one shape everywhere, {code, message, details}.

// Each code's HTTP status and WebSocket close code (docs/PROTOCOL.md#errors).
const table = {
  invalid_argument: [400, 4400], unauthenticated: [401, 4401], permission_denied: [403, 4403],
  not_found: [404, 4404], conflict: [409, 4409], payload_too_large: [413, 1009], budget_exceeded: [402, 4402],
  rate_limited: [429, 4429], concurrency_limit: [429, 4430], resource_exhausted: [429, 4431],
  unavailable: [503, 1013], timeout: [504, 4504], internal: [500, 1011],
} as const satisfies Record<string, readonly [number, number]>;

/** One error code of the protocol. */
export type Code = keyof typeof table;

/** The error codes of the protocol. */
export const codes = Object.keys(table) as readonly Code[];

/** isCode reports whether s is one of the protocol's codes. */
export function isCode(s: unknown): s is Code {
  return typeof s === "string" && Object.hasOwn(table, s);
}

/** The WebSocket close code of an error code. */
export function closeCodeFor(code: Code): number {
  return table[code][1];
}

/** The error code a WebSocket close code carries; undefined when it is not one of Warren's. */
export function codeForCloseCode(close: number): Code | undefined {
  return codes.find((c) => table[c][1] === close);
}

/** The error code of an HTTP status (429 is rate_limited), as wire.CodeForHTTPStatus. */
export function codeForHTTPStatus(status: number): Code {
  const c = codes.find((c) => table[c][0] === status && c !== "concurrency_limit" && c !== "resource_exhausted");
  return c ?? (status >= 500 ? "internal" : "invalid_argument");
}

/** Where an error came from, besides its code. */
export interface ErrorContext {
  /** The HTTP status of the answer that carried it. */
  status?: number;
  /** The WebSocket close code of the connection it ended. */
  closeCode?: number;
  cause?: unknown;
}

// A message longer than this (from the network: untrusted) is cut.
const maxMessage = 4096;

/**
 * WarrenError is every error the SDK raises: one the platform sent (an error message on the agent channel,
 * an HTTP error body, a WebSocket close) or one the SDK found (a lost connection is `unavailable`, a
 * malformed server message `internal`). `code` is always one of the protocol's codes.
 */
export class WarrenError extends Error {
  readonly code: Code;
  readonly details?: Record<string, unknown>;
  readonly status?: number;
  readonly closeCode?: number;

  constructor(code: Code, message: string, details?: Record<string, unknown>, ctx: ErrorContext = {}) {
    super(message.length > maxMessage ? message.slice(0, maxMessage) + "…" : message, { cause: ctx.cause });
    this.name = "WarrenError";
    this.code = code;
    if (details !== undefined) this.details = details;
    if (ctx.status !== undefined) this.status = ctx.status;
    if (ctx.closeCode !== undefined) this.closeCode = ctx.closeCode;
  }

  /** The error as the protocol's JSON shape. */
  toJSON(): { code: Code; message: string; details?: Record<string, unknown> } {
    return this.details ? { code: this.code, message: this.message, details: this.details } : { code: this.code, message: this.message };
  }

  /**
   * fromPayload reads an error object received from the network ({code, message, details?}); anything
   * malformed becomes an `internal` error saying so. fallback is the code to use when the object names none.
   */
  static fromPayload(v: unknown, ctx: ErrorContext = {}, fallback: Code = "internal"): WarrenError {
    if (typeof v !== "object" || v === null || Array.isArray(v)) {
      return new WarrenError(fallback, "malformed error: not a JSON object", undefined, ctx);
    }
    const o = v as Record<string, unknown>;
    const code = isCode(o.code) ? o.code : fallback;
    const message = typeof o.message === "string" ? o.message : `error ${String(o.code ?? code).slice(0, 64)}`;
    const details =
      typeof o.details === "object" && o.details !== null && !Array.isArray(o.details) ? (o.details as Record<string, unknown>) : undefined;
    return new WarrenError(code, message, details, ctx);
  }
}

/** isWarrenError reports whether err is a WarrenError, with the given code when code is set. */
export function isWarrenError(err: unknown, code?: Code): err is WarrenError {
  return err instanceof WarrenError && (code === undefined || err.code === code);
}

/** The error of the HTTP answer status with body (text, possibly the protocol's JSON error). */
export function errorFromHTTP(status: number, body: string): WarrenError {
  const fallback = codeForHTTPStatus(status);
  try {
    const v: unknown = JSON.parse(body);
    if (typeof v === "object" && v !== null && isCode((v as { code?: unknown }).code)) {
      return WarrenError.fromPayload(v, { status }, fallback);
    }
  } catch {
    // not JSON: the status says it all
  }
  return new WarrenError(fallback, `HTTP ${status}${body ? ": " + body.slice(0, 200) : ""}`, undefined, { status });
}

const closeNormal = 1000;

/**
 * The error of a WebSocket closed with code and reason: undefined for a normal close. The reason is the
 * JSON error when it fitted the close frame, else the bare code; prev, the error message received just
 * before the close, completes a shortened reason.
 */
export function errorFromClose(code: number, reason: string, prev?: WarrenError): WarrenError | undefined {
  if (code === closeNormal) return undefined;
  const r = reason.trim();
  if (r.startsWith("{")) {
    try {
      const v: unknown = JSON.parse(r);
      if (typeof v === "object" && v !== null && isCode((v as { code?: unknown }).code)) {
        const e = WarrenError.fromPayload(v, { closeCode: code });
        return prev && prev.code === e.code && prev.message === e.message ? withClose(prev, code) : e;
      }
    } catch {
      // fall through: a plain reason
    }
  }
  let c = codeForCloseCode(code);
  let msg = r;
  if (isCode(r)) {
    c = r;
    msg = "";
  }
  if (c === undefined) {
    switch (code) {
      case 1001: // going away
      case 1006: // abnormal: no close frame
      case 1012: // service restart
      case 1013: // try again later
      case 1014: // bad gateway
        c = "unavailable";
        break;
      case 1009:
        c = "payload_too_large";
        break;
      default:
        c = "internal";
    }
  }
  if (msg === "" && prev && prev.code === c) return withClose(prev, code);
  return new WarrenError(c, msg || `connection closed with status ${code}`, undefined, { closeCode: code });
}

function withClose(e: WarrenError, closeCode: number): WarrenError {
  return new WarrenError(e.code, e.message, e.details, { closeCode, status: e.status });
}

/** SessionClosedError is raised by the operations of a session that was closed or ended normally. */
export class SessionClosedError extends Error {
  constructor(message = "warren: session closed") {
    super(message);
    this.name = "SessionClosedError";
  }
}
