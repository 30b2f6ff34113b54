// Your backend: an endpoint that mints a Warren token for the user your own login already knows.
// Run: WARREN_ISSUER=acme WARREN_KID=acme-v1 WARREN_ISSUER_SECRET=wsk_… npx tsx examples/mint-token.ts
// (`warren admin keys rotate ISS` prints the key id and the secret once; keep the secret server-side.)

import { createServer } from "node:http";

import { WarrenError } from "@warren/sdk";
import { mintToken } from "@warren/sdk/token";

const issuer = process.env.WARREN_ISSUER ?? "acme";
const kid = process.env.WARREN_KID;
const secret = process.env.WARREN_ISSUER_SECRET ?? "";

// The start of today, UTC: a "day" budget needs the window it is for.
function today(): Date {
  const now = new Date();
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
}

createServer((req, res) => {
  const user = req.headers["x-user-id"]; // stands for your session lookup
  if (typeof user !== "string") {
    res.writeHead(401).end();
    return;
  }
  try {
    const token = mintToken(
      secret,
      { iss: issuer, sub: user, budget: { ai: 5_000_000, compute: 3600, window: "day", windowStart: today() } }, // $5 and 1 h a day
      { kid, expiresInSeconds: 3600 },
    );
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ token }));
  } catch (e) {
    // Bad claims or a malformed secret: a WarrenError with code invalid_argument, before anything is signed.
    res.writeHead(500).end(e instanceof WarrenError ? e.code : "internal");
  }
}).listen(3000);
