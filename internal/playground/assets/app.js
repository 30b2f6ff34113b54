// The Warren playground: plain JavaScript over the TypeScript SDK's browser build (./sdk/, embedded in
// warren by `make sdk-js`). It mints a dev token (POST token, same origin), opens an agent session over
// WebTransport with the WebSocket as fallback (AutoTransport; ?transport=websocket or webtransport forces
// one), renews the token before it expires, streams each turn (text as it comes, tool calls as they start, the turn's cost), browses the
// sandbox's files and runs commands.

const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

function showError(msg) {
  $("error").textContent = msg;
  $("error").hidden = false;
}
function clearError() {
  $("error").hidden = true;
}
function setState(state, status) {
  document.body.dataset.state = state;
  $("status").textContent = status;
}

let sdk;
try {
  sdk = await import("./sdk/index.js");
} catch (e) {
  setState("no-sdk", "no SDK");
  showError(
    "The TypeScript SDK's browser build is not embedded in this warren binary: run `make sdk-js` (or `make build`) and restart warren dev.\n(" +
      (e && e.message ? e.message : String(e)) + ")",
  );
  throw e;
}

let client;
let session;
let cwd = ".";
let readyStatus = "";

function transportFor(name) {
  switch (name) {
    case "websocket":
      return new sdk.WebSocketTransport();
    case "webtransport":
      return new sdk.WebTransportTransport();
    default:
      return new sdk.AutoTransport(undefined, { timeoutMs: 3000 });
  }
}

function describe(e) {
  if (e instanceof sdk.WarrenError) return `${e.code}: ${e.message}` + (e.closeCode ? ` (close ${e.closeCode})` : "");
  return e && e.message ? e.message : String(e);
}

// mint asks the playground for a dev token for user; a refusal is the WarrenError its {code, message} says.
async function mint(user) {
  const r = await fetch("token", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ user }) });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    const code = typeof body.code === "string" ? body.code : "unavailable";
    const message = typeof body.message === "string" ? body.message : `HTTP ${r.status}`;
    throw new sdk.WarrenError(code, `token: ${message}`, undefined, { status: r.status });
  }
  return body;
}

// Token renewal: a new token for the same user at 80% of the current one's life (12 minutes before a
// one-hour token expires), handed to the client, so requests and reconnects keep working; a failed
// renewal is shown and tried again every 30 s until the token expires.
let renewTimer;
let currentUser;
let renewals = 0;
function scheduleRenewal(user, expiresAt) {
  clearTimeout(renewTimer);
  const left = Date.parse(expiresAt) - Date.now();
  const at = Date.now() + Math.max(0, left * 0.8);
  document.body.dataset.tokenExpiresAt = expiresAt;
  document.body.dataset.tokenRenewAt = new Date(at).toISOString();
  renewTimer = setTimeout(() => void renewToken(user), at - Date.now());
}
async function renewToken(user) {
  try {
    const body = await mint(user);
    client.setToken(body.token);
    renewals++;
    document.body.dataset.tokenRenewals = String(renewals);
    scheduleRenewal(user, body.expiresAt);
  } catch (e) {
    showError("renewing the token: " + describe(e));
    const expires = Date.parse(document.body.dataset.tokenExpiresAt ?? "");
    if (Date.now() < expires) renewTimer = setTimeout(() => void renewToken(user), 30_000);
  }
}

async function start(user) {
  setState("connecting", "minting a token…");
  clearError();
  clearTimeout(renewTimer);
  if (session) {
    await session.close().catch(() => {});
    session = undefined;
  }
  const body = await mint(user);
  const params = new URLSearchParams(location.search);
  const transport = transportFor(params.get("transport"));
  client = new sdk.Client(location.origin, body.token, { transport });
  currentUser = body.user;
  scheduleRenewal(body.user, body.expiresAt);
  setState("connecting", `connecting as ${body.user}…`);
  session = await client.connect({ options: { includePartialMessages: true } });
  $("transport").textContent = transport.last || transport.name;
  if (session.notice) {
    $("notice").textContent = session.notice;
    $("notice").hidden = false;
  }
  readyStatus = `${body.issuer}/${body.user} · session ${session.id.slice(0, 8)} · ${session.model || "default model"}`;
  setState("ready", readyStatus);
  for (const b of [$("send"), $("run")]) b.disabled = false;
  await listFiles(cwd);
}

// ---- chat ----

function addMsg(cls, text) {
  const m = el("div", "msg " + cls, text);
  $("log").append(m);
  m.scrollIntoView({ block: "end" });
  return m;
}

// One turn's rendering state: the text bubble of the current message, tool calls by id and by stream index.
function newTurn() {
  return { bubble: undefined, text: "", byIndex: new Map(), byId: new Map() };
}

function toolElement(turn, id, name) {
  let t = turn.byId.get(id);
  if (!t) {
    t = el("div", "tool-call");
    t.dataset.toolUseId = id;
    t.append(el("span", "name", "⚙ " + name), el("pre", "input"), el("pre", "result"));
    $("log").append(t);
    turn.byId.set(id, t);
    turn.bubble = undefined; // text after a tool call goes in a new bubble
  }
  return t;
}

function render(turn, m) {
  switch (m.type) {
    case "stream_event": {
      const ev = m.event;
      if (ev.type === "message_start") turn.byIndex.clear();
      if (ev.type === "content_block_start" && ev.content_block?.type === "tool_use") {
        turn.byIndex.set(ev.index, toolElement(turn, ev.content_block.id, ev.content_block.name));
      }
      if (ev.type === "content_block_delta" && ev.delta?.type === "text_delta") {
        if (!turn.bubble) turn.bubble = addMsg("assistant", "");
        turn.bubble.textContent += ev.delta.text;
        turn.text += ev.delta.text;
      }
      if (ev.type === "content_block_delta" && ev.delta?.type === "input_json_delta") {
        const t = turn.byIndex.get(ev.index);
        if (t) t.querySelector(".input").textContent += ev.delta.partial_json;
      }
      break;
    }
    case "assistant": {
      const blocks = Array.isArray(m.message?.content) ? m.message.content : [];
      for (const b of blocks) {
        if (b.type === "tool_use") {
          const t = toolElement(turn, b.id, b.name);
          t.querySelector(".input").textContent = JSON.stringify(b.input, null, 1);
        } else if (b.type === "text" && b.text && !turn.text.includes(b.text)) {
          addMsg("assistant", b.text);
          turn.text += b.text;
        }
      }
      break;
    }
    case "user": {
      const blocks = Array.isArray(m.message?.content) ? m.message.content : [];
      for (const b of blocks) {
        if (b.type !== "tool_result") continue;
        const t = turn.byId.get(b.tool_use_id);
        if (!t) continue;
        const text = typeof b.content === "string" ? b.content : (b.content ?? []).map((c) => c.text ?? "").join("");
        t.querySelector(".result").textContent = "→ " + text.slice(0, 2000);
        t.classList.add(b.is_error ? "failed" : "ok");
      }
      break;
    }
    case "result": {
      const c = m.cost ?? { ai_microdollars: Math.round((m.total_cost_usd ?? 0) * 1e6), compute_seconds: 0 };
      const tokens = Object.values(c.models ?? {}).reduce((n, u) => n + u.input_tokens + u.output_tokens, 0);
      const line = el(
        "div",
        "cost",
        `turn cost: $${(c.ai_microdollars / 1e6).toFixed(6)} AI · ${c.compute_seconds} s compute · ${tokens} tokens · ${m.num_turns} model calls · ${m.duration_ms} ms` +
          (m.is_error ? ` · ${m.subtype}` : ""),
      );
      line.dataset.aiMicrodollars = String(c.ai_microdollars);
      $("log").append(line);
      line.scrollIntoView({ block: "end" });
      break;
    }
    case "error":
      addMsg("assistant", `error ${m.payload?.code}: ${m.payload?.message}`);
      break;
  }
}

async function sendPrompt(text) {
  addMsg("user", text);
  setState("busy", "the agent is working…");
  $("send").disabled = true;
  $("interrupt").disabled = false;
  const turn = newTurn();
  try {
    for await (const m of session.prompt(text)) render(turn, m);
  } catch (e) {
    showError("turn: " + describe(e));
  } finally {
    $("send").disabled = false;
    $("interrupt").disabled = true;
    setState("ready", readyStatus);
    await listFiles(cwd);
  }
}

// ---- files ----

function join(dir, name) {
  return dir === "." ? name : dir + "/" + name;
}

async function listFiles(dir) {
  let entries;
  try {
    entries = await client.sandbox.list(dir);
  } catch (e) {
    showError(`list ${dir}: ` + describe(e));
    return;
  }
  cwd = dir;
  $("cwd").textContent = dir;
  const tree = $("tree");
  tree.replaceChildren();
  if (dir !== ".") {
    const up = el("li", "dir", "..");
    up.onclick = () => listFiles(dir.includes("/") ? dir.slice(0, dir.lastIndexOf("/")) : ".");
    tree.append(up);
  }
  for (const f of entries) {
    const li = el("li", f.type === "dir" ? "dir" : "file", f.name + (f.type === "file" ? `  (${f.size} B)` : ""));
    li.dataset.path = join(dir, f.name);
    li.onclick = () => (f.type === "dir" ? listFiles(li.dataset.path) : openFile(li.dataset.path));
    tree.append(li);
  }
  document.body.dataset.files = String(entries.length);
}

const maxView = 256 << 10;

async function openFile(path) {
  $("file-name").textContent = path;
  $("file-view").textContent = "…";
  try {
    const bytes = await client.sandbox.readFile(path);
    const text = new TextDecoder().decode(bytes.subarray(0, maxView));
    $("file-view").textContent = text + (bytes.length > maxView ? `\n… (${bytes.length} bytes, first ${maxView} shown)` : "");
  } catch (e) {
    $("file-view").textContent = "";
    showError(`open ${path}: ` + describe(e));
  }
}

// ---- exec ----

async function runCommand(command) {
  const out = $("exec-out");
  out.replaceChildren(el("div", "cmd", "$ " + command));
  $("run").disabled = true;
  try {
    for await (const ev of client.sandbox.execStream({ command })) {
      if (ev.type === "exit") {
        const r = ev.result;
        const exit = el("div", "exit", `exit ${r.exitCode} · ${r.durationMs} ms` + (r.timedOut ? " · timed out" : "") + (r.truncated ? " · truncated" : ""));
        exit.dataset.exitCode = String(r.exitCode);
        out.append(exit);
      } else {
        out.append(el("span", ev.type, ev.data));
      }
    }
  } catch (e) {
    out.append(el("div", "stderr", describe(e)));
  } finally {
    $("run").disabled = false;
    await listFiles(cwd);
  }
}

// ---- wiring ----

$("login").onsubmit = (ev) => {
  ev.preventDefault();
  start($("user").value).catch((e) => {
    setState("error", "not connected");
    showError(describe(e));
  });
};
$("prompt-form").onsubmit = (ev) => {
  ev.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || !session) return;
  $("prompt").value = "";
  void sendPrompt(text);
};
// Enter sends; Shift+Enter is a new line (and Enter while an input method composes is the composition's).
$("prompt").onkeydown = (ev) => {
  if (ev.key !== "Enter" || ev.shiftKey || ev.isComposing) return;
  ev.preventDefault();
  $("prompt-form").requestSubmit();
};
$("interrupt").onclick = () => session?.interrupt().catch((e) => showError(describe(e)));
$("exec-form").onsubmit = (ev) => {
  ev.preventDefault();
  const c = $("command").value.trim();
  if (c && client) void runCommand(c);
};
$("refresh").onclick = () => client && listFiles(cwd);

// For tests and the console: renew the token now.
window.playground = { renewToken: () => renewToken(currentUser) };

start($("user").value).catch((e) => {
  setState("error", "not connected");
  showError(describe(e));
});
