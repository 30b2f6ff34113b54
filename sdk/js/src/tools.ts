// Client tools (docs/PROTOCOL.md#host-tools): tools the application executes itself, which the agent in
// the sandbox calls as MCP tools named mcp__<server>__<tool>; a tool_call names the tool as declared, with
// its server.

import { WarrenError } from "./errors.js";

/** An MCP content block of a tool result: text, image, audio, resource or resource_link. */
export type ToolContent =
  | { type: "text"; text: string }
  | { type: "image" | "audio"; data: string; mimeType: string }
  | { type: "resource"; resource: Record<string, unknown> }
  | { type: "resource_link"; uri: string; name: string; [k: string]: unknown };

/** What a client tool answers. At most 1 MiB encoded (wire.MaxToolResultBytes). */
export interface ToolResult {
  content: ToolContent[];
  isError?: boolean;
  structuredContent?: Record<string, unknown>;
}

/** The largest tool result the runner takes. */
export const maxToolResultBytes = 1 << 20;

/** What a handler learns about the call besides its input. */
export interface ToolCallContext {
  callId: string;
  /** The tool's name as declared (mcp__<server>__<tool> from a runner before declared names: agentName). */
  toolName: string;
  serverName?: string;
  /** The name the agent called: mcp__<server>__<tool>. */
  qualifiedName?: string;
  toolUseId?: string;
  timeoutMs?: number;
}

/**
 * A tool handler. Its input is what the model wrote (a JSON object): untrusted, validate it. A thrown
 * error becomes an error result carrying its message; a string is a text result.
 */
export type ToolHandler = (input: Record<string, unknown>, call: ToolCallContext) => ToolResult | string | Promise<ToolResult | string>;

/** One client tool. */
export interface Tool {
  /** [a-zA-Z0-9_-], at most 64 characters. */
  name: string;
  description?: string;
  /** The JSON Schema of the input; absent: any object. */
  inputSchema?: Record<string, unknown>;
  /** How long the runner waits for the answer, 1000 to 1800000 ms (absent: 5 minutes). */
  timeoutMs?: number;
  handler: ToolHandler;
}

const nameRe = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Whether name is a valid MCP server name (wire.ValidMCPServerName): 1 to 64 of [a-zA-Z0-9_-], without
 * "__" and not ending with "_". The agent reads mcp__<server>__<tool> up to the first "__", so a server
 * app__lookup, or app_ (whose tool x reads as server app, tool _x), would name another server's tools.
 */
export function validMCPServerName(name: string): boolean {
  return typeof name === "string" && nameRe.test(name) && !name.includes("__") && !name.endsWith("_");
}

/** The name the agent called a tool by, mcp__<server>__<tool>, from any runner. */
export function agentName(call: { toolName: string; qualifiedName?: string }): string {
  return call.qualifiedName ?? call.toolName;
}

/** A group of client tools under one MCP server name. */
export class ToolServer {
  constructor(
    readonly name: string,
    readonly tools: Tool[],
    readonly version?: string,
  ) {
    if (!validMCPServerName(name)) {
      throw new WarrenError("invalid_argument", `tool server name ${JSON.stringify(String(name).slice(0, 64))}: want 1 to 64 of [a-zA-Z0-9_-], without "__" and not ending with "_"`, { field: "name" });
    }
    for (const t of tools) {
      if (!nameRe.test(t.name)) throw new WarrenError("invalid_argument", `tool name ${JSON.stringify(String(t.name).slice(0, 64))}: want 1 to 64 of [a-zA-Z0-9_-]`);
    }
  }

  /**
   * The server's entry for the session options' mcpServers. It has no type (a server with tools is a client
   * server), so its tool_calls name the tools as declared.
   */
  mcpServer(): Record<string, unknown> {
    return {
      name: this.name,
      ...(this.version ? { version: this.version } : {}),
      tools: this.tools.map((t) => ({
        name: t.name,
        ...(t.description !== undefined ? { description: t.description } : {}),
        ...(t.inputSchema !== undefined ? { inputSchema: t.inputSchema } : {}),
        ...(t.timeoutMs !== undefined ? { timeoutMs: t.timeoutMs } : {}),
      })),
    };
  }

  /**
   * The tool a call is for, by the name the agent called (mcp__<server>__<tool>): a tool_call's payload
   * (from any runner: agentName), or that name itself.
   */
  lookup(call: string | { toolName: string; serverName?: string; qualifiedName?: string }): Tool | undefined {
    const name = typeof call === "string" ? call : agentName(call);
    const prefix = `mcp__${this.name}__`;
    if (!name.startsWith(prefix) || !validMCPServerName(this.name)) return undefined;
    const rest = name.slice(prefix.length);
    return this.tools.find((t) => t.name === rest);
  }
}

/** A result of one text block. */
export function textResult(text: string): ToolResult {
  return { content: [{ type: "text", text }] };
}

/** A failed call's result, saying why. */
export function errorResult(message: string): ToolResult {
  return { content: [{ type: "text", text: message }], isError: true };
}

/** Runs tool's handler on a call: its result, or an error result when it throws or answers too much. */
export async function runTool(tool: Tool, input: Record<string, unknown>, call: ToolCallContext): Promise<ToolResult> {
  let res: ToolResult;
  try {
    const r = await tool.handler(input, call);
    res = typeof r === "string" ? textResult(r) : r;
    if (typeof res !== "object" || res === null || !Array.isArray(res.content)) {
      return errorResult(`tool ${tool.name}: the handler answered no content`);
    }
  } catch (e) {
    return errorResult(e instanceof Error ? e.message : String(e));
  }
  const size = new TextEncoder().encode(JSON.stringify(res)).length;
  if (size > maxToolResultBytes) {
    return errorResult(`tool ${tool.name}: result of ${size} bytes exceeds the ${maxToolResultBytes} byte limit`);
  }
  return res;
}
