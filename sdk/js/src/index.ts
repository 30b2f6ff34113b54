// @warren/sdk: agent sessions, client tools, the sandbox API and the region list of Warren, for Node and
// browsers. Minting tokens (Node only) is in "@warren/sdk/token".

export * from "./errors.js";
export * from "./events.js";
export * from "./tools.js";
export * from "./transport.js";
export * from "./sse.js";
export * from "./sandbox.js";
export * from "./git.js";
export * from "./execute.js";
export * from "./files.js";
export * from "./terminal.js";
export * from "./preview.js";
export * from "./session.js";
export * from "./client.js";
export * from "./webtransport.js";
