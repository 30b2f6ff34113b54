// The server messages of the agent channel (docs/PROTOCOL.md#server-messages): Warren's own (control,
// tool_call, error, pong) and the agent's events, exactly as the Claude Code CLI emits them in stream-json
// (the Claude Agent SDK's message types), with Warren's cost on result.

import { WarrenError } from "./errors.js";

/** Fields every server message may carry. */
interface Envelope {
  /** Per-session sequence number (docs/PROTOCOL.md#resume); absent on errors sent before a session exists. */
  seq?: number;
}

/** The session states (docs/PROTOCOL.md#session-states). */
export type SessionState = "initializing" | "ready" | "processing" | "waiting_tool" | "idle" | "completed" | "error";

/** control ready's data. */
export interface ReadyData {
  sessionId: string;
  region?: string;
  model?: string;
  /** Set when a scripted demo model answers instead of Claude. */
  notice?: string;
  /** The runner echoes prompt uuids and runs a prompt sent again with the same uuid once (docs/PROTOCOL.md#prompt-identity). */
  promptUuids?: boolean;
  /** A tool_call names the tool as its client declared it, with serverName and qualifiedName (docs/PROTOCOL.md#host-tools). */
  declaredToolNames?: boolean;
  [k: string]: unknown;
}

export interface ReadyMessage extends Envelope {
  type: "control";
  payload: { action: "ready"; data: ReadyData };
}

export interface SessionInfoMessage extends Envelope {
  type: "control";
  payload: { action: "session_info"; data: { sessionId: string; state: SessionState } };
}

/**
 * tool_call: the agent called a client tool; answer with a tool_result (Session.sendToolResult). toolName is
 * the tool's name as declared, serverName its server's and qualifiedName the agent's mcp__<server>__<tool>;
 * from a runner that does not say declaredToolNames in ready, or for a server declared with a type,
 * toolName is mcp__<server>__<tool> (agentName reads either).
 */
export interface ToolCallMessage extends Envelope {
  type: "tool_call";
  payload: {
    callId: string;
    toolName: string;
    serverName?: string;
    qualifiedName?: string;
    input: Record<string, unknown>;
    toolUseId?: string;
    timeoutMs?: number;
  };
}

export interface ErrorMessage extends Envelope {
  type: "error";
  payload: { code: string; message: string; details?: Record<string, unknown> };
}

export interface PongMessage extends Envelope {
  type: "pong";
  payload?: { timestamp?: number };
}

/** A content block of a message (text, thinking, tool_use, tool_result, image, ...). */
export type ContentBlock =
  | { type: "text"; text: string }
  | { type: "thinking"; thinking: string; signature?: string }
  | { type: "tool_use"; id: string; name: string; input: unknown }
  | { type: "tool_result"; tool_use_id: string; content?: string | ContentBlock[]; is_error?: boolean }
  | { type: string; [k: string]: unknown };

export interface Usage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens?: number;
  cache_read_input_tokens?: number;
  [k: string]: unknown;
}

export interface APIMessage {
  id?: string;
  model?: string;
  role: "assistant" | "user";
  content: string | ContentBlock[];
  stop_reason?: string | null;
  usage?: Usage;
  [k: string]: unknown;
}

/** system events (subtype init lists the tools, MCP servers and model). */
export interface SystemMessage extends Envelope {
  type: "system";
  subtype: string;
  session_id?: string;
  uuid?: string;
  model?: string;
  cwd?: string;
  tools?: string[];
  mcp_servers?: { name: string; status: string }[];
  permissionMode?: string;
  [k: string]: unknown;
}

export interface AssistantMessage extends Envelope {
  type: "assistant";
  message: APIMessage;
  parent_tool_use_id: string | null;
  session_id: string;
  uuid?: string;
  error?: string;
}

export interface UserMessage extends Envelope {
  type: "user";
  message: APIMessage;
  parent_tool_use_id: string | null;
  session_id: string;
  uuid?: string;
  tool_use_result?: unknown;
}

/** A partial message (with includePartialMessages): the Messages API's stream events. */
export interface StreamEventMessage extends Envelope {
  type: "stream_event";
  event: {
    type: string;
    index?: number;
    delta?: { type: string; text?: string; partial_json?: string; thinking?: string; stop_reason?: string };
    [k: string]: unknown;
  };
  parent_tool_use_id: string | null;
  session_id: string;
  uuid?: string;
}

/** Warren's cost of a turn (docs/PROTOCOL.md#cost). */
export interface Cost {
  ai_microdollars: number;
  compute_seconds: number;
  models?: Record<
    string,
    { input_tokens: number; output_tokens: number; cache_read_input_tokens: number; cache_creation_input_tokens: number; microdollars: number }
  >;
}

export interface ResultMessage extends Envelope {
  type: "result";
  subtype: "success" | "error_max_turns" | "error_during_execution" | "error_max_budget_usd" | string;
  is_error: boolean;
  result?: string;
  duration_ms: number;
  duration_api_ms?: number;
  num_turns: number;
  session_id: string;
  uuid?: string;
  stop_reason?: string | null;
  /** What Warren charged for the turn, in dollars. */
  total_cost_usd: number;
  usage?: Usage;
  modelUsage?: Record<string, { inputTokens: number; outputTokens: number; costUSD: number; [k: string]: unknown }>;
  permission_denials?: { tool_name: string; tool_use_id: string; tool_input: unknown }[];
  errors?: string[];
  structured_output?: unknown;
  /** Warren's cost extension. */
  cost?: Cost;
}

/** Any other message (new agent event types get through as they are). */
export interface OtherMessage extends Envelope {
  type: string;
  [k: string]: unknown;
}

/** One server message. */
export type ServerMessage =
  | ReadyMessage
  | SessionInfoMessage
  | ToolCallMessage
  | ErrorMessage
  | PongMessage
  | SystemMessage
  | AssistantMessage
  | UserMessage
  | StreamEventMessage
  | ResultMessage;

// The message as the network gave it: checked by parseServerMessage before use.
type Loose = Record<string, unknown>;

/**
 * parseServerMessage reads one frame of the agent channel. Only a frame that is not a JSON object with a
 * string type is an error (`internal`): agent events of new shapes get through; typed views check fields
 * before use.
 */
export function parseServerMessage(text: string): ServerMessage {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new WarrenError("internal", "malformed server message: not JSON", undefined, { cause: e });
  }
  if (typeof v !== "object" || v === null || Array.isArray(v) || typeof (v as Loose).type !== "string") {
    throw new WarrenError("internal", "malformed server message: not a JSON object with a type");
  }
  const m = v as Loose;
  if (m.seq !== undefined && (typeof m.seq !== "number" || !Number.isSafeInteger(m.seq) || m.seq < 0)) {
    delete m.seq; // as the Go SDK: a seq of the wrong type is ignored
  }
  return m as unknown as ServerMessage;
}

function control(m: ServerMessage): { action: string; data: Loose } | undefined {
  if (m.type !== "control") return undefined;
  const p = (m as unknown as Loose).payload as Loose | undefined;
  if (typeof p !== "object" || p === null || typeof p.action !== "string") return undefined;
  const data = typeof p.data === "object" && p.data !== null ? (p.data as Loose) : {};
  return { action: p.action, data };
}

/** The data of a control ready, undefined for any other message. */
export function readyData(m: ServerMessage): ReadyData | undefined {
  const c = control(m);
  return c?.action === "ready" && typeof c.data.sessionId === "string" ? (c.data as ReadyData) : undefined;
}

/** The state a control session_info reports, undefined for any other message. */
export function sessionState(m: ServerMessage): SessionState | undefined {
  const c = control(m);
  return c?.action === "session_info" && typeof c.data.state === "string" ? (c.data.state as SessionState) : undefined;
}

/** The call of a tool_call, undefined for any other message or a malformed one. */
export function toolCall(m: ServerMessage): ToolCallMessage["payload"] | undefined {
  if (m.type !== "tool_call") return undefined;
  const p = (m as unknown as Loose).payload as Loose | undefined;
  if (typeof p !== "object" || p === null || typeof p.callId !== "string" || typeof p.toolName !== "string") return undefined;
  const input = typeof p.input === "object" && p.input !== null && !Array.isArray(p.input) ? p.input : {};
  const call = { ...(p as ToolCallMessage["payload"]), input: input as Record<string, unknown> };
  if (typeof p.serverName !== "string") delete call.serverName;
  if (typeof p.qualifiedName !== "string") delete call.qualifiedName;
  return call;
}

/**
 * The uuid of the prompt a session_info or an error names (docs/PROTOCOL.md#prompt-identity): data.uuid or
 * details.uuid; undefined when it names none.
 */
export function promptOf(m: ServerMessage): string | undefined {
  const c = control(m);
  if (c?.action === "session_info") return typeof c.data.uuid === "string" && c.data.uuid !== "" ? c.data.uuid : undefined;
  const id = messageError(m)?.details?.uuid;
  return typeof id === "string" && id !== "" ? id : undefined;
}

/** The error an error message carries, undefined for any other message. */
export function messageError(m: ServerMessage): WarrenError | undefined {
  if (m.type !== "error") return undefined;
  const p = (m as unknown as Loose).payload;
  return WarrenError.fromPayload(p === undefined ? m : p);
}

/** The text of an assistant or user message's text blocks, joined. */
export function textOf(m: ServerMessage): string {
  if (m.type !== "assistant" && m.type !== "user") return "";
  const c = (m as AssistantMessage).message?.content;
  if (typeof c === "string") return c;
  if (!Array.isArray(c)) return "";
  return c
    .filter((b): b is { type: "text"; text: string } => b?.type === "text" && typeof (b as { text?: unknown }).text === "string")
    .map((b) => b.text)
    .join("");
}

/** Narrowing helpers. */
export const isResult = (m: ServerMessage): m is ResultMessage => m.type === "result";
export const isAssistant = (m: ServerMessage): m is AssistantMessage => m.type === "assistant";
export const isUser = (m: ServerMessage): m is UserMessage => m.type === "user";
export const isStreamEvent = (m: ServerMessage): m is StreamEventMessage => m.type === "stream_event";
export const isSystem = (m: ServerMessage): m is SystemMessage => m.type === "system";
