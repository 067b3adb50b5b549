/**
 * The chat page `k3 serve` answers at `/`: one self-contained HTML file (no external resources, so
 * it works offline), talking to this server's own /v1/chat/completions with streaming. Model text is
 * only ever inserted with textContent (never as HTML). The think channel (reasoning_content) shows
 * in a collapsible block; the footer of each reply has tokens, speed, prompt-cache reuse and an
 * expert-drop warning when the server flags one.
 */

export const CHAT_PAGE_CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'";

export const CHAT_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>k3 chat</title>
<style>
  :root { color-scheme: light dark; --fg: #1b1b1b; --bg: #fafafa; --muted: #6b6b6b; --card: #fff; --accent: #2f6fdf; --warn: #b54708; }
  @media (prefers-color-scheme: dark) { :root { --fg: #e8e8e8; --bg: #141414; --muted: #9a9a9a; --card: #1f1f1f; --accent: #7aa7ff; --warn: #f5a25d; } }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg); display: flex; flex-direction: column; height: 100vh; }
  header { padding: 10px 16px; border-bottom: 1px solid #8883; display: flex; gap: 12px; align-items: center; flex-wrap: wrap; }
  header b { font-size: 16px; }
  header label { color: var(--muted); font-size: 13px; }
  header input { width: 5.5em; }
  #log { flex: 1; overflow-y: auto; padding: 16px; display: flex; flex-direction: column; gap: 12px; }
  .msg { max-width: 860px; padding: 10px 14px; border-radius: 10px; background: var(--card); box-shadow: 0 1px 2px #0002; white-space: pre-wrap; word-wrap: break-word; }
  .user { align-self: flex-end; background: var(--accent); color: #fff; }
  .think { color: var(--muted); font-size: 13px; margin-bottom: 6px; }
  .think summary { cursor: pointer; }
  .meta { color: var(--muted); font-size: 12px; margin-top: 6px; }
  .warn { color: var(--warn); }
  form { display: flex; gap: 8px; padding: 12px 16px; border-top: 1px solid #8883; }
  textarea { flex: 1; resize: vertical; min-height: 2.6em; max-height: 40vh; font: inherit; padding: 8px; }
  button { font: inherit; padding: 0 16px; }
</style>
</head>
<body>
<header>
  <b>k3</b> <span id="model">…</span>
  <label>system <input id="system" placeholder="(none)" style="width: 16em"></label>
  <label>max tokens <input id="max" type="number" min="1" value="512"></label>
  <label>temperature <input id="temp" type="number" min="0" step="0.1" value="0"></label>
  <label><input id="think" type="checkbox" checked> thinking</label>
  <button id="clear" type="button">new chat</button>
</header>
<main id="log" aria-live="polite"></main>
<form id="form">
  <textarea id="input" placeholder="Message (Enter sends, Shift+Enter for a new line)" autofocus></textarea>
  <button id="send">Send</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let history = [];
let busy = null; // the AbortController of the reply being generated

function bubble(cls, text) {
  const d = document.createElement("div");
  d.className = "msg " + cls;
  d.textContent = text;
  $("log").appendChild(d);
  d.scrollIntoView({ block: "end" });
  return d;
}

// With \`k3 serve --api-key\`, the page asks for the key once per tab (kept in sessionStorage).
let apiKey = sessionStorage.getItem("k3-api-key") || "";
async function api(path, init) {
  for (let attempt = 0; ; attempt++) {
    const headers = Object.assign({}, (init && init.headers) || {}, apiKey ? { authorization: "Bearer " + apiKey } : {});
    const res = await fetch(path, Object.assign({}, init, { headers }));
    if (res.status !== 401 || attempt > 0) return res;
    apiKey = (window.prompt("This server needs an API key (k3 serve --api-key):") || "").trim();
    sessionStorage.setItem("k3-api-key", apiKey);
  }
}

api("/v1/models").then((r) => r.json()).then((m) => {
  const info = m.data && m.data[0];
  if (info) $("model").textContent = info.id + (info.context_length ? " · context " + info.context_length : "");
}).catch(() => { $("model").textContent = "(server not reachable)"; });

$("clear").onclick = () => { if (busy) busy.abort(); history = []; $("log").textContent = ""; };
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
});

$("form").onsubmit = async (e) => {
  e.preventDefault();
  if (busy) { busy.abort(); return; }
  const text = $("input").value.trim();
  if (!text) return;
  $("input").value = "";
  bubble("user", text);
  history.push({ role: "user", content: text });
  const messages = ($("system").value.trim() ? [{ role: "system", content: $("system").value.trim() }] : []).concat(history);
  const box = bubble("bot", "");
  const thinkBox = document.createElement("details");
  thinkBox.className = "think";
  const thinkTitle = document.createElement("summary");
  thinkTitle.textContent = "thinking";
  const thinkText = document.createElement("div");
  thinkBox.append(thinkTitle, thinkText);
  const answer = document.createElement("div");
  const meta = document.createElement("div");
  meta.className = "meta";
  box.append(thinkBox, answer, meta);
  thinkBox.hidden = true;
  busy = new AbortController();
  $("send").textContent = "Stop";
  const t0 = performance.now();
  let content = "", reasoning = "", usage = null, drops = 0, finish = null, pieces = 0, thinkPieces = 0;
  try {
    const res = await api("/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages, stream: true, max_tokens: Number($("max").value) || 512, temperature: Number($("temp").value) || 0, thinking: $("think").checked }),
      signal: busy.signal,
    });
    if (!res.ok) {
      const err = await res.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || res.status + " " + res.statusText);
    }
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let at;
      while ((at = buf.indexOf("\\n\\n")) >= 0) {
        const line = buf.slice(0, at).replace(/^data: /, "");
        buf = buf.slice(at + 2);
        if (line === "[DONE]") continue;
        // SSE comments: the server's prefill progress (": prefill 45.0% 256/584 tokens, ..."), else ignored
        if (line.startsWith(": prefill ")) { if (!pieces && !thinkPieces) meta.textContent = "reading the prompt: " + line.slice(10); continue; }
        if (line.startsWith(":")) continue;
        const ev = JSON.parse(line);
        if (ev.error) throw new Error(ev.error.message);
        const c = ev.choices && ev.choices[0];
        const d = (c && c.delta) || {};
        if (d.reasoning_content) {
          reasoning += d.reasoning_content; thinkText.textContent = reasoning; thinkBox.hidden = false;
          thinkPieces++;
          thinkTitle.textContent = "thinking… " + thinkPieces + " tokens, " + ((performance.now() - t0) / 1000).toFixed(1) + " s";
        }
        if ((d.content || d.reasoning_content) && meta.textContent.startsWith("reading the prompt")) meta.textContent = "";
        if (d.content) { content += d.content; answer.textContent = content; pieces++; }
        if (c && c.finish_reason) finish = c.finish_reason;
        if (ev.usage) usage = ev.usage;
        if (ev.x_k3 && ev.x_k3.expert_drops) drops = ev.x_k3.expert_drops;
        box.scrollIntoView({ block: "end" });
      }
    }
    history.push({ role: "assistant", content });
  } catch (err) {
    if (err.name === "AbortError") meta.textContent = "stopped";
    else { meta.textContent = "error: " + err.message; meta.classList.add("warn"); }
    history.pop();
  } finally {
    busy = null;
    $("send").textContent = "Send";
  }
  if (thinkPieces) thinkTitle.textContent = "thought for " + thinkPieces + " tokens";
  if (usage) {
    const s = (performance.now() - t0) / 1000;
    const cached = usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens;
    meta.textContent = usage.completion_tokens + " tokens in " + s.toFixed(1) + " s (" + (usage.completion_tokens / s).toFixed(2) + " tok/s) · prompt " + usage.prompt_tokens +
      (cached ? " (" + cached + " from the prompt cache)" : "") + (finish === "length" ? " · cut at max tokens" : "");
  }
  if (drops) {
    const w = document.createElement("div");
    w.className = "meta warn";
    w.textContent = drops + " routed expert(s) could not be read: this reply is not the model's (see the server log)";
    box.appendChild(w);
  }
};
</script>
</body>
</html>
`;
