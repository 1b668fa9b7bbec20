// onebox console: threads (conversations). Loaded before app.js; uses its helpers (el, api,
// badge, errorBox, streamEvents, ...) at call time. Every model or user text is a text node.
"use strict";

// ---------------------------------------------------------------- threads list

function threadsPage(signal) {
  const rows = el("tbody", { id: "threads-body" });
  const out = el("div", { id: "thread-new-result" });
  const profile = el("input", { type: "text", id: "thread-profile", placeholder: "profile (optional)", size: 18 });
  const form = el("form", { class: "card row-flex", id: "thread-new", onsubmit: async (e) => {
    e.preventDefault();
    out.replaceChildren();
    try {
      const body = profile.value.trim() ? { profile: profile.value.trim() } : {};
      const made = await api("/v1/threads", { method: "POST", body, signal });
      location.hash = `#/threads/${made.id}`;
    } catch (err) { if (err.name !== "AbortError") out.replaceChildren(errorBox(err)); }
  } }, profile, el("button", { class: "primary", type: "submit", id: "thread-create" }, "New thread"), out);
  view.replaceChildren(el("h1", {}, "Threads"), form,
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {},
      ...["thread", "profile", "turns", "summary", "updated"].map((h) => el("th", {}, h)))), rows)));
  api("/v1/threads?limit=200", { signal }).then((data) => {
    rows.replaceChildren(...data.threads.map(threadRow));
    if (!data.threads.length) rows.append(el("tr", {}, el("td", { colspan: 5, class: "muted" }, "no threads yet")));
  }).catch((err) => { if (err.name !== "AbortError" && err.status !== 401) rows.replaceChildren(el("tr", {}, el("td", { colspan: 5 }, errorBox(err)))); });
}

function threadRow(t) {
  const last = t.summary || "";
  return el("tr", { class: "clickable", "data-thread": t.id, onclick: () => { location.hash = `#/threads/${t.id}`; } },
    el("td", { class: "mono" }, t.title || t.id.slice(0, 8)), el("td", {}, t.profile || "default"),
    el("td", { class: "num" }, t.turns ?? "–"),
    el("td", { class: "thread-last" }, last.length > 80 ? `${last.slice(0, 80)}…` : last),
    el("td", {}, fmtTime(t.updated_at)));
}

// ---------------------------------------------------------------- one thread

function threadPage(threadId, signal) {
  const state = { thread: null, turns: [], runs: new Map(), memories: new Map(), live: "", liveOut: new Map(), sending: false, openContexts: new Set(), threadId, signal };
  view.replaceChildren(el("p", { class: "muted" }, "loading thread…"));

  async function load() {
    try {
      const data = await api(`/v1/threads/${threadId}`, { signal });
      state.thread = data.thread || data;
      state.turns = data.turns || [];
      await Promise.all([...state.turns.map((t) => loadRun(t.run_id)), loadMemories()]);
      render();
    } catch (err) {
      if (err.name !== "AbortError" && err.status !== 401) view.replaceChildren(errorBox(err));
      return;
    }
    await followUnfinished();
  }
  // A turn still running when the page opens (its upkeep waiting for the provider, or sent
  // from the terminal): follow its run to the end before taking the next message, which
  // the server would refuse until then.
  async function followUnfinished() {
    const last = state.turns[state.turns.length - 1];
    const run = last && last.run_id ? state.runs.get(last.run_id) : null;
    if (!run || TERMINAL.includes(run.detail.run.status)) return;
    state.sending = true;
    const waiting = `turn ${last.turn} is still running (${run.detail.run.status.toLowerCase()}); the next message waits for it`;
    state.live = waiting;
    render();
    const follow = new AbortController();
    signal.addEventListener("abort", () => follow.abort());
    await followRun(last.run_id, 0, follow, (event) => {
      onEvent(event);
      state.live = `${waiting} · event ${event.id ?? ""} ${event.type}`;
      const live = document.getElementById("thread-live");
      if (live) live.textContent = state.live;
      if (!RUN_ENDED.includes(event.type)) return true;
      follow.abort();
      return false;
    }).catch(() => {});
    if (signal.aborted) return;
    state.sending = false;
    state.live = `turn ${last.turn} has ended`;
    await refreshRuns();
  }
  // The thread's memories (its scope), to show what each turn's context recalled.
  async function loadMemories() {
    const scope = state.thread.memory_scope;
    if (!scope) return;
    const data = await api(`/v1/memory?scope=${encodeURIComponent(scope)}&limit=1000`, { signal });
    state.memories = new Map(data.memories.map((m) => [m.id, m]));
  }
  // A run that ended is loaded once more after it ended (its outputs are kept just after).
  async function loadRun(runId) {
    if (!runId) return;
    const known = state.runs.get(runId);
    if (known && known.settled) return;
    const [detail, artifacts] = await Promise.all([api(`/v1/runs/${runId}`, { signal }), api(`/v1/runs/${runId}/artifacts`, { signal })]);
    state.runs.set(runId, { detail, files: artifacts.files, settled: Boolean(known) && TERMINAL.includes(known.detail.run.status) });
  }

  function render() {
    const t = state.thread;
    const input = el("textarea", { id: "thread-message", rows: 3, placeholder: "message…" });
    const out = el("div", { id: "thread-send-result" });
    const send = el("button", { class: "primary", type: "submit", id: "thread-send", disabled: state.sending }, state.sending ? "running…" : "Send");
    const form = el("form", { class: "card stack", id: "thread-form", onsubmit: (e) => {
      e.preventDefault();
      if (input.value.trim()) postMessage(input.value);
    } }, input, el("div", { class: "row-flex" }, send, el("span", { class: "muted", id: "thread-live" }, state.live)), out);
    view.replaceChildren(
      el("a", { href: "#/threads" }, "← threads"),
      el("div", { class: "row-flex run-head" }, el("h1", {}, t.title || "thread", " ", el("span", { class: "muted mono" }, t.id.slice(0, 8)))),
      el("div", { class: "card kv" },
        el("span", { class: "muted" }, "thread id"), el("span", { class: "mono", id: "thread-id" }, t.id),
        el("span", { class: "muted" }, "profile"), el("span", {}, t.profile || "default"),
        el("span", { class: "muted" }, "created"), el("span", {}, fmtTime(t.created_at)),
        t.forked_from ? [el("span", { class: "muted" }, "forked from"), el("span", { id: "thread-forked-from" },
          el("a", { href: `#/threads/${t.forked_from.thread_id}`, class: "mono" }, t.forked_from.thread_id), ` at turn ${t.forked_from.turn}`)] : null,
        t.summary ? [el("span", { class: "muted" }, `summary v${t.summary_version ?? "?"}`), el("span", { id: "thread-summary" }, t.summary)] : null),
      el("div", { id: "turns" }, ...state.turns.map((turn) => turnView(turn, state))),
      form);
  }

  async function postMessage(text) {
    state.sending = true;
    state.live = "sending…";
    render();
    try {
      await sendTurn(threadId, text, signal, onEvent);
      state.sending = false;
    } catch (err) {
      if (err.name === "AbortError") return;
      state.sending = false;
      state.live = "";
      render();
      document.getElementById("thread-message").value = text;
      document.getElementById("thread-send-result").replaceChildren(errorBox(err));
      return;
    }
    await refreshRuns();
  }

  let pending = null;
  function onEvent(event) {
    state.live = `live · event ${event.id ?? ""} ${event.type}`;
    const live = document.getElementById("thread-live");
    if (live) live.textContent = state.live;
    if (event.type === "step_output" || event.type === "step_output_truncated") appendLive(state.liveOut, event);
    else if (!pending) pending = setTimeout(() => { pending = null; refreshRuns(); }, 150);
  }
  async function refreshRuns() {
    try {
      const data = await api(`/v1/threads/${threadId}`, { signal });
      state.thread = data.thread || state.thread;
      state.turns = data.turns || [];
      await Promise.all([...state.turns.map((t) => loadRun(t.run_id)), loadMemories()]);
      const typed = document.getElementById("thread-message");
      const keep = typed ? typed.value : "";
      render();
      document.getElementById("thread-message").value = keep;
    } catch (err) { /* the next event retries */ }
  }
  load();
}

const RUN_ENDED = ["run_succeeded", "run_failed", "run_cancelled", "run_dead"];

// POST a message: the response is the turn's run events, live (SSE), read until the run
// ends; if the stream breaks first, the run's own stream resumes after the last event.
async function sendTurn(threadId, text, signal, onEvent) {
  const turn = new AbortController();
  signal.addEventListener("abort", () => turn.abort());
  const res = await fetch(`/v1/threads/${threadId}/messages`, { method: "POST", signal: turn.signal,
    headers: { ...authHeaders(), "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify({ message: text }) });
  if (!res.ok) {
    const data = await res.json().catch(() => ({ message: res.statusText }));
    if (res.status === 401) showLogin(data.message);
    throw new ApiError(res.status, data);
  }
  const runId = res.headers.get("X-Onebox-Run-Id");
  let last = 0, ended = false;
  const seen = (event) => {
    if (event.id) last = event.id;
    onEvent(event);
    if (RUN_ENDED.includes(event.type)) { ended = true; turn.abort(); }
    return !ended;
  };
  await readEvents(res, seen).catch((err) => { if (!ended && signal.aborted) throw err; });
  if (!ended && runId && !signal.aborted) await followRun(runId, last, turn, seen);
}

async function followRun(runId, last, turn, seen) {
  const res = await fetch(`/v1/runs/${runId}/events/stream`, { signal: turn.signal,
    headers: { ...authHeaders(), "Last-Event-ID": String(last) } });
  if (res.ok) await readEvents(res, seen).catch(() => {});
}

async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = parseEvent(buffer.slice(0, cut));
      buffer = buffer.slice(cut + 2);
      if (event.type && onEvent(event) === false) return;
    }
  }
}

function parseEvent(chunk) {
  const event = {};
  for (const line of chunk.split("\n")) {
    if (line.startsWith("id: ")) event.id = Number(line.slice(4));
    else if (line.startsWith("event: ")) event.type = line.slice(7);
    else if (line.startsWith("data: ")) { try { event.data = JSON.parse(line.slice(6)); } catch { event.data = line.slice(6); } }
  }
  return event;
}

// ---------------------------------------------------------------- a turn

function turnView(turn, state) {
  const run = turn.run_id ? state.runs.get(turn.run_id) : null;
  const status = run ? run.detail.run.status : turn.status;
  const answer = run && run.detail.run.answer !== undefined && run.detail.run.answer !== null ? run.detail.run.answer : turn.answer;
  return el("div", { class: "card turn", "data-turn": turn.turn },
    el("div", { class: "row-flex run-head" }, el("span", { class: "muted" }, `turn ${turn.turn} · ${fmtTime(turn.created_at)}`),
      el("span", { class: "row-flex" }, status ? badge(status) : null, turn.run_id ? el("a", { href: `#/runs/${turn.run_id}`, class: "mono" }, `run ${turn.run_id.slice(0, 8)}`) : null)),
    el("div", { class: "bubble user" }, el("b", {}, "you "), el("span", { class: "turn-message" }, turn.message ?? turn.content ?? "")),
    answer !== undefined && answer !== null ? el("div", { class: "bubble agent" }, el("b", {}, "agent "),
      el("span", { class: "turn-answer" }, typeof answer === "string" ? answer : JSON.stringify(answer, null, 2))) : null,
    run ? turnSteps(run, state.liveOut) : null,
    run && run.files.length ? turnFiles(turn.run_id, run.files) : null,
    turn.context ? contextView(turn.context, state.memories, turn.turn, state.openContexts) : null,
    status && TERMINAL.includes(status) ? forkTurnBox(turn, state) : null);
}

// Fork the thread at this turn: a new thread with the conversation before it (turns,
// memory, summary, workspace), where this turn is asked again (as written, or edited).
function forkTurnBox(turn, state) {
  const text = el("textarea", { id: `fork-turn-message-${turn.turn}`, rows: 2 }, turn.message || "");
  const out = el("div", {});
  const go = el("button", { class: "primary", id: `fork-turn-${turn.turn}`, onclick: async () => {
    go.disabled = true;
    try {
      const made = await api(`/v1/threads/${state.threadId}/fork`, { method: "POST", signal: state.signal,
        body: { turn: turn.turn, message: text.value.trim() || null } });
      location.hash = `#/threads/${made.thread.id}`;
    } catch (err) { if (err.name !== "AbortError") { out.replaceChildren(errorBox(err)); go.disabled = false; } }
  } }, "Fork from this turn");
  return el("details", { class: "fork-box", "data-fork-turn": turn.turn },
    el("summary", {}, "Fork from this turn: a new thread with what came before, this turn asked again"),
    text, go, out);
}

function turnSteps(run, liveOut) {
  const steps = run.detail.steps || [];
  if (!steps.length) return null;
  return el("details", { class: "turn-steps", open: steps.some((s) => s.status === "RUNNING") },
    el("summary", {}, `steps · ${steps.length}`),
    ...steps.map((s) => el("div", { class: "turn-step", "data-step": s.step_id },
      el("div", { class: "row-flex" }, badge(s.status), el("span", { class: "mono" }, s.step_id), el("span", { class: "muted" }, `${s.tool || ""} · ${fmtMs(s.resources && s.resources.duration_ms)}`)),
      s.code ? el("pre", { class: "code" }, s.code) : null,
      s.status === "RUNNING" ? liveView(s.execution_id, liveOut)
        : [s.stdout ? el("pre", { class: "stdout" }, s.stdout) : null, s.stderr ? el("pre", { class: "err stderr" }, s.stderr) : null])));
}

function turnFiles(runId, files) {
  return el("div", { class: "turn-files" }, el("span", { class: "muted" }, "files: "),
    ...files.map((f) => el("span", { class: "mono turn-file", "data-file": f.path }, `${f.path} (${fmtBytes(f.size_bytes)}) `)));
}

// What went into the turn's prompt (the stored record): the memories recalled, with their
// dates, the summary version and the token count of each part.
// A live update re-renders the turn: the card stays open if the reader opened it.
function contextView(ctx, memories, turnNumber, openContexts) {
  const parts = ctx.parts || {};
  const ids = (parts.memories && parts.memories.sources) || [];
  const tokens = Object.entries(parts).map(([name, p]) => `${name} ${p.tokens}`).join(" · ");
  const remember = (event) => {
    if (event.currentTarget.open) openContexts.add(turnNumber); else openContexts.delete(turnNumber);
  };
  return el("details", { class: "turn-context", open: openContexts.has(turnNumber), ontoggle: remember },
    el("summary", {}, `context · ${ids.length} ${ids.length === 1 ? "memory" : "memories"} · ${fmtTokens(ctx.total_tokens)} of ${fmtTokens(ctx.budget_tokens)} tokens`),
    el("div", { class: "muted mono context-tokens" }, tokens, ` · summary v${ctx.summary_version ?? 0}`),
    ids.length ? el("ul", { class: "context-memories" }, ...ids.map((id) => memoryItem(id, memories.get(id)))) : null);
}

function memoryItem(id, m) {
  if (!m) return el("li", { "data-memory": id, class: "muted" }, `memory ${id.slice(0, 8)} (no longer in memory)`);
  const date = m.valid_from || m.created_at;
  return el("li", { "data-memory": id }, el("span", { class: "muted" }, `${date ? new Date(date).toLocaleDateString() : "–"} · `),
    el("span", { class: "memory-content" }, m.content), m.invalid_at ? el("span", { class: "muted" }, " (superseded)") : null);
}
