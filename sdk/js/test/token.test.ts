// mintToken refuses exactly what the edge refuses: the claim cases in internal/token/testdata/claims.json,
// which internal/token's TestVerifyClaimCases runs through the edge's verifier. And bad arguments to
// mintToken and the Client are WarrenErrors, never a TypeError from deep inside.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { Client, WarrenError, isWarrenError } from "../src/index.js";
import { type Claims, mintToken } from "../src/token.js";

const secret = "wsk_" + "A1".repeat(22);

interface ClaimCase {
  name: string;
  ok: boolean;
  claims: Claims;
}

// dist/test/token.test.js → the repository's root is four levels up.
const cases = JSON.parse(readFileSync(new URL("../../../../internal/token/testdata/claims.json", import.meta.url), "utf8")) as ClaimCase[];

const refused = (code: string) => (e: unknown) => isWarrenError(e) && e.code === code;

test("mintToken mints the claims the edge accepts and refuses the ones it refuses", () => {
  assert.ok(cases.length > 40, `only ${cases.length} claim cases`);
  for (const c of cases) {
    if (c.ok) {
      const tok = mintToken(secret, c.claims, { kid: "acme-v1" });
      const body = JSON.parse(Buffer.from(tok.split(".")[1]!, "base64url").toString());
      assert.equal(body.sub, c.claims.sub, c.name);
    } else {
      assert.throws(() => mintToken(secret, c.claims, { kid: "acme-v1" }), refused("invalid_argument"), c.name);
    }
  }
});

test("mintToken: windowStart may be a Date; a day window without one is refused", () => {
  const start = new Date(Date.UTC(2026, 2, 4));
  const tok = mintToken(secret, { iss: "acme", sub: "u", budget: { ai: 5_000_000, window: "day", windowStart: start } });
  const body = JSON.parse(Buffer.from(tok.split(".")[1]!, "base64url").toString());
  assert.equal(body.budget.windowStart, "2026-03-04T00:00:00.000Z");
  assert.throws(() => mintToken(secret, { iss: "acme", sub: "u", budget: { ai: 5_000_000, window: "day" } }), /windowStart is required/);
  assert.throws(() => mintToken(secret, { iss: "acme", sub: "u", budget: { window: "day", windowStart: new Date(NaN) } }), refused("invalid_argument"));
});

// The edge reads claim names exactly (docs/PROTOCOL.md#json): another spelling is another claim, which it
// ignores like every unknown claim, so mintToken signs it as written and the known claim keeps its value.
test("a second spelling of a claim is another claim", () => {
  for (const extra of ["Sub", "EXP", "\u017fub", "budGet"]) {
    const tok = mintToken(secret, { iss: "acme", sub: "u", [extra]: "x" });
    const body = JSON.parse(Buffer.from(tok.split(".")[1]!, "base64url").toString());
    assert.equal(body.sub, "u", extra);
    assert.equal(body[extra], "x", extra);
  }
});

test("bad arguments are WarrenErrors, not TypeErrors", () => {
  const cases: [string, () => unknown][] = [
    ["no secret", () => mintToken(undefined as unknown as string, { iss: "a", sub: "b" })],
    ["a number for the secret", () => mintToken(42 as unknown as string, { iss: "a", sub: "b" })],
    ["no claims", () => mintToken(secret, undefined as unknown as Claims)],
    ["null claims", () => mintToken(secret, null as unknown as Claims)],
    ["null options", () => mintToken(secret, { iss: "a", sub: "b" }, null as unknown as {})],
    ["a BigInt claim", () => mintToken(secret, { iss: "a", sub: "b", n: 1n })],
    ["a fractional exp", () => mintToken(secret, { iss: "a", sub: "b", exp: 1.5 })],
    ["a negative lifetime", () => mintToken(secret, { iss: "a", sub: "b" }, { expiresInSeconds: -1 })],
    ["a kid with a newline", () => mintToken(secret, { iss: "a", sub: "b" }, { kid: "k\n" })],
    ["no URL", () => new Client(undefined as unknown as string, "t")],
    ["a number for the URL", () => new Client(8080 as unknown as string, "t")],
    ["not a URL", () => new Client("not a url", "t")],
    ["a file URL", () => new Client("file:///etc/passwd", "t")],
    ["no token", () => new Client("http://127.0.0.1:8080", undefined as unknown as string)],
    ["null options", () => new Client("http://127.0.0.1:8080", "t", null as unknown as {})],
  ];
  for (const [name, f] of cases) {
    assert.throws(f, (e: unknown) => e instanceof WarrenError && (e.code === "invalid_argument" || e.code === "unauthenticated"), name);
  }
  assert.throws(() => new Client("http://127.0.0.1:8080", undefined as unknown as string), refused("unauthenticated"));
});

test("setToken renews the token later requests send, and refuses what the constructor refuses", async () => {
  const seen: (string | null)[] = [];
  const fetchFn = (async (_url: unknown, init?: RequestInit) => {
    seen.push(new Headers(init?.headers).get("Authorization"));
    return new Response(JSON.stringify({ entries: [] }), { status: 200, headers: { "Content-Type": "application/json" } });
  }) as typeof fetch;
  const c = new Client("http://127.0.0.1:1", "old-token", { fetch: fetchFn });
  await c.sandbox.list(".");
  c.setToken("new-token");
  await c.sandbox.list(".");
  assert.deepEqual(seen, ["Bearer old-token", "Bearer new-token"]);
  assert.equal(c.token, "new-token");
  assert.throws(() => c.setToken(undefined as unknown as string), refused("unauthenticated"));
  assert.throws(() => c.setToken(""), refused("unauthenticated"));
  assert.equal(c.token, "new-token", "a refused token leaves the old one");
});
