// Git in the sandbox through the edge (docs/PROTOCOL.md#git), against the dev stack internal/devstack's
// TestTypeScriptSDK starts: init, status, commit, log, diff, branch, checkout, a bundle since a base, and
// typed refusals of option injection, path escapes and forbidden transports.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, WarrenError } from "../src/index.js";
import { mintToken } from "../src/token.js";

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: these tests run from Go against a dev stack: go test ./internal/devstack -run TestTypeScriptSDK (make test)`);
  return v;
}

function isCode(code: string): (e: unknown) => boolean {
  return (e: unknown) => e instanceof WarrenError && e.code === code;
}

test("git: init, commit, status, log, diff, branch, checkout and a bundle since a base", async () => {
  const token = mintToken(env("WARREN_SECRET"), { iss: env("WARREN_ISSUER"), sub: "js-git", budget: { ai: 1_000_000, compute: 3600, window: "lifetime" } }, { kid: env("WARREN_KID") });
  const git = new Client(env("WARREN_URL"), token).sandbox;
  const g = git.git;
  const head = await g.init({ path: "repo" });
  assert.deepEqual(head, { path: "repo", branch: "main" });
  await git.writeFile("repo/a.txt", "one\n");
  const st = await g.status("repo");
  assert.equal(st.clean, false);
  assert.deepEqual(st.entries, [{ path: "a.txt", index: "?", worktree: "?" }]);
  const first = await g.commit({ path: "repo", message: "first", all: true });
  assert.match(first.commit ?? "", /^[0-9a-f]{40}$/);
  await git.writeFile("repo/a.txt", "one\ntwo\n");
  assert.match((await g.diff("repo")).diff, /\+two/);
  const second = await g.commit({ path: "repo", message: "second", all: true, authorName: "Ada", authorEmail: "ada@example.com" });
  const log = await g.log("repo");
  assert.deepEqual(log.commits.map((c) => [c.commit, c.subject, c.authorName]), [
    [second.commit, "second", "Ada"],
    [first.commit, "first", "js-git"],
  ]);
  assert.equal((await g.log("repo", { limit: 1 })).truncated, true);
  assert.match((await g.diff("repo", { base: first.commit })).diff, /\+two/);
  assert.equal((await g.branch({ path: "repo", name: "side", start: first.commit })).commit, first.commit);
  assert.deepEqual(await g.checkout({ path: "repo", ref: "side" }), { path: "repo", branch: "side", commit: first.commit });
  assert.equal((await g.checkout({ path: "repo", ref: "topic", create: true, start: "main" })).commit, second.commit);
  const bundle = new TextDecoder().decode(await g.bundle("repo", { base: first.commit }));
  assert.ok(bundle.startsWith("# v2 git bundle\n-" + first.commit), bundle.slice(0, 120));
  assert.ok(bundle.includes(`${second.commit} HEAD\n`));
  await assert.rejects(g.bundle("repo", { base: "topic" }), isCode("not_found"));
  await assert.rejects(g.log("repo", { ref: "--output=/workspace/x" }), isCode("invalid_argument"));
  await assert.rejects(g.checkout({ path: "repo", ref: "-f" }), isCode("invalid_argument"));
  await assert.rejects(g.status("../"), isCode("permission_denied"));
  await assert.rejects(g.clone({ url: "ext::sh -c id", path: "c" }), isCode("invalid_argument"));
  await assert.rejects(g.clone({ url: "https://user:pw@example.com/r.git", path: "c" }), isCode("invalid_argument"));
});
