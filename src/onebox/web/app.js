// onebox console: plain JavaScript, no build step. Talks to the same /v1 API as every client.
"use strict";

const KEY_STORAGE = "onebox.api_key";
const STATUSES = ["PENDING", "RUNNING", "WAITING", "SUCCEEDED", "FAILED", "CANCELLED", "DEAD"];
const view = document.getElementById("view");
let pageAbort = null; // aborts timers and streams of the page being left

// ---------------------------------------------------------------- helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat(Infinity)) {  // nested lists of nodes, any depth
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children.flat()) if (child) node.append(child);
  return node;
}

const badge = (status) => el("span", { class: `badge s-${status}`, "data-status": status }, status);
const fmtTime = (t) => (t ? new Date(t).toLocaleString() : "–");
const fmtCost = (usd) => (usd === null || usd === undefined ? "–" : `$${usd < 1 ? usd.toFixed(4) : usd.toFixed(2)}`);
const fmtTokens = (n) => (n ? n.toLocaleString() : "–");
const TERMINAL = ["SUCCEEDED", "FAILED", "CANCELLED", "DEAD"];
// "2 of 3", or just "2" when the row's limit is below it (a held agent action has a limit of 1)
const attemptLabel = (s) => (s.max_attempts && s.max_attempts >= s.attempt ? `${s.attempt} of ${s.max_attempts}` : `${s.attempt}`);
const fmtMs = (ms) => (ms === null || ms === undefined ? "–" : ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// A running step's time so far, redrawn every second by the run page (tickElapsed).
const fmtElapsed = (ms) => { const t = Math.max(0, Math.floor(ms / 1000)); return t < 60 ? `${t} s` : `${Math.floor(t / 60)} min ${String(t % 60).padStart(2, "0")} s`; };
const elapsedSince = (since) => el("span", { class: "elapsed", "data-since": since, title: `running since ${fmtTime(since)}` },
  fmtElapsed(Date.now() - new Date(since).getTime()));
function tickElapsed() {
  for (const span of document.querySelectorAll(".elapsed[data-since]")) span.textContent = fmtElapsed(Date.now() - new Date(span.dataset.since).getTime());
}
const durationOf = (s) => (s.status === "RUNNING" && s.started_at && !s.finished_at ? elapsedSince(s.started_at) : fmtMs(s.resources.duration_ms));

function apiKey() { return localStorage.getItem(KEY_STORAGE) || ""; }
function authHeaders() { const k = apiKey(); return k ? { Authorization: `Bearer ${k}` } : {}; }

class ApiError extends Error {
  constructor(status, body) { super(body.message || `HTTP ${status}`); this.status = status; this.body = body; }
}

async function api(path, options = {}) {
  const headers = { ...authHeaders(), ...(options.headers || {}) };
  let body = options.body;
  if (body !== undefined && !(body instanceof FormData)) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(body);
  }
  const res = await fetch(path, { ...options, headers, body });
  if (res.status === 204) return null;
  const data = await res.json().catch(() => ({ message: res.statusText }));
  if (!res.ok) {
    if (res.status === 401) showLogin(data.message);
    throw new ApiError(res.status, data);
  }
  return data;
}

function errorBox(err) {
  return el("div", { class: "error-box" }, err.body ? `${err.body.code}: ${err.body.message}` : String(err));
}

// ---------------------------------------------------------------- login

function showLogin(message) {
  stopPage();
  const input = el("input", { type: "password", id: "api-key", placeholder: "obx_…", size: 52 });
  const form = el("form", { class: "card", onsubmit: (e) => {
    e.preventDefault();
    localStorage.setItem(KEY_STORAGE, input.value.trim());
    route();
  } },
  el("h1", {}, "API key"),
  el("p", { class: "muted" }, message || "This server needs an API key.",
    " `onebox up` printed one; `onebox keys create` makes more. It stays in this browser only."),
  el("div", { class: "row-flex" }, input, el("button", { class: "primary", type: "submit" }, "Use key")));
  view.replaceChildren(form);
}

document.getElementById("logout").addEventListener("click", () => {
  localStorage.removeItem(KEY_STORAGE);
  showLogin("Key forgotten.");
});

// ---------------------------------------------------------------- router

function stopPage() {
  if (pageAbort) pageAbort.abort();
  pageAbort = new AbortController();
  return pageAbort.signal;
}

function route() {
  const signal = stopPage();
  const hash = location.hash || "#/runs";
  const [, section, id] = hash.split("/");
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === section);
  document.getElementById("logout").hidden = !apiKey();
  document.getElementById("who").textContent = apiKey() ? `key ${apiKey().slice(0, 12)}…` : "";
  if (section === "new") return newRunPage(signal);
  if (section === "runs" && id) return runPage(decodeURIComponent(id), signal);
  if (section === "threads" && id) return threadPage(decodeURIComponent(id), signal);
  if (section === "threads") return threadsPage(signal);
  if (section === "knowledge") return knowledgePage(signal);
  if (section === "memory") return memoryPage(signal);
  return runsPage(signal);
}
window.addEventListener("hashchange", route);

// ---------------------------------------------------------------- runs list

const PAGE_RUNS = 100;
const listState = { statuses: new Set(), q: "", pages: [] }; // pages: the `before` cursor of each older page

function runsPage(signal) {
  const table = el("tbody", { id: "runs-body" });
  const chips = STATUSES.map((s) => el("button", {
    class: `chip${listState.statuses.has(s) ? " on" : ""}`, "data-filter": s,
    onclick: (e) => {
      listState.statuses.has(s) ? listState.statuses.delete(s) : listState.statuses.add(s);
      e.target.classList.toggle("on");
      refresh();
    } }, s));
  const search = el("input", { type: "search", id: "run-search", placeholder: "search name, id, plan…", value: listState.q,
    oninput: (e) => { listState.q = e.target.value; listState.pages = []; refresh(); } });
  const status = el("span", { class: "muted", id: "runs-updated" });
  const newer = el("button", { id: "runs-newer", hidden: true, onclick: () => { listState.pages.pop(); refresh(); } }, "← newer");
  const older = el("button", { id: "runs-older", hidden: true, onclick: () => { listState.pages.push(older.dataset.before); refresh(); } }, "older →");
  const pageNo = el("span", { class: "muted", id: "runs-page" });
  view.replaceChildren(
    el("div", { class: "row-flex" }, el("h1", {}, "Runs"), el("a", { href: "#/new", class: "button primary", id: "new-run" }, "New run")),
    el("div", { class: "filters" }, ...chips, search, status),
    el("div", { class: "table-wrap" }, el("table", { class: "runs" }, el("thead", {}, el("tr", {}, ...RUN_COLUMNS.map((h) => el("th", { class: `c-${h}` }, h)))), table)),
    el("div", { class: "row-flex pager" }, newer, pageNo, older));

  async function refresh() {
    const params = new URLSearchParams();
    for (const s of listState.statuses) params.append("status", s);
    if (listState.q) params.set("q", listState.q);
    const before = listState.pages[listState.pages.length - 1];
    if (before) params.set("before", before);
    params.set("limit", String(PAGE_RUNS));
    try {
      const data = await api(`/v1/runs?${params}`, { signal });
      table.replaceChildren(...data.runs.map(runRow));
      if (!data.runs.length) table.append(el("tr", {}, el("td", { colspan: 9, class: "muted" }, "no runs match")));
      newer.hidden = !listState.pages.length;
      older.hidden = data.runs.length < PAGE_RUNS;
      if (data.runs.length) older.dataset.before = data.runs[data.runs.length - 1].created_at;
      pageNo.textContent = listState.pages.length || !older.hidden ? `page ${listState.pages.length + 1}` : "";
      status.textContent = `live · ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      if (err.name !== "AbortError" && err.status !== 401) status.textContent = `error: ${err.message}`;
    }
  }
  refresh();
  (async () => { while (!signal.aborted) { await sleep(2000); if (!signal.aborted) await refresh(); } })();
}

// On a narrow screen (style.css) each row is a card: status, name, steps and duration on
// one line, the error on its own line under them.
const RUN_COLUMNS = ["status", "name", "run", "steps", "created", "duration", "tokens", "cost", "error"];

function runRow(run) {
  const duration = run.duration_ms ?? (run.started_at ? (new Date(run.finished_at || Date.now()) - new Date(run.started_at)) : null);
  const error = run.error ? (run.error.length > 80 ? `${run.error.slice(0, 80)}…` : run.error) : "";
  const cells = [badge(run.status), run.name || el("span", { class: "muted" }, "(unnamed)"), run.id.slice(0, 8),
    `${run.steps_succeeded}/${run.steps_started}`, fmtTime(run.created_at), fmtMs(duration), fmtTokens(run.tokens),
    fmtCost(run.cost_usd), error];
  const extra = { run: { class: "mono" }, tokens: { class: "num" }, cost: { class: "num" }, error: { class: "run-error", title: run.error || "" } };
  return el("tr", { class: "clickable", "data-run": run.id, onclick: () => { location.hash = `#/runs/${run.id}`; } },
    ...RUN_COLUMNS.map((c, i) => { const a = extra[c] || {}; return el("td", { ...a, class: `c-${c}${a.class ? ` ${a.class}` : ""}` }, cells[i]); }));
}

// ---------------------------------------------------------------- new run

const PLAN_EXAMPLE = "name: hello\nsteps:\n  - id: hello\n    tool: bash\n    code: echo hello\n";
const PROFILE_STORAGE = "onebox.new_run_profile";

// The model a task runs with: one of the tenant's stored profiles (the last one picked here,
// else the first), or the server's own model (ONEBOX_LLM__MODEL) when none is picked.
function profilePicker(signal) {
  const pick = el("select", { id: "new-profile", "aria-label": "profile",
    onchange: (e) => localStorage.setItem(PROFILE_STORAGE, e.target.value) },
  el("option", { value: "" }, "the server's own model"));
  const note = el("span", { class: "muted", id: "new-profile-note" }, "loading profiles…");
  api("/v1/profiles", { signal }).then((data) => {
    pick.append(...data.profiles.map((p) => el("option", { value: p.name }, `${p.name} (${p.spec.model})`)));
    const names = data.profiles.map((p) => p.name);
    const last = localStorage.getItem(PROFILE_STORAGE);
    pick.value = names.includes(last) ? last : (names[0] || "");
    note.textContent = names.length ? "" : "no stored profile: `onebox profile create` or PUT /v1/profiles/NAME adds one";
  }).catch((err) => { if (err.name !== "AbortError") note.textContent = `profiles: ${err.message}`; });
  return { pick, box: el("label", { class: "row-flex", id: "new-profile-box" }, el("span", { class: "muted" }, "model"), pick, note) };
}

function newRunPage(signal) {
  let kind = "task";
  const text = el("textarea", { id: "new-text", rows: 10, placeholder: "what should the agent do?" });
  const name = el("input", { type: "text", id: "new-name", placeholder: "name (optional)" });
  const files = el("input", { type: "file", id: "new-files", multiple: true });
  const out = el("div", { id: "new-result" });
  const profile = profilePicker(signal);
  const pick = (k) => {
    kind = k;
    for (const b of tabs.querySelectorAll("button")) b.classList.toggle("on", b.dataset.kind === k);
    text.placeholder = k === "task" ? "what should the agent do?" : PLAN_EXAMPLE;
    profile.box.hidden = k !== "task";
  };
  const tabs = el("div", { class: "tabs" },
    el("button", { type: "button", class: "chip on", "data-kind": "task", onclick: () => pick("task") }, "Task"),
    el("button", { type: "button", class: "chip", "data-kind": "plan", onclick: () => pick("plan") }, "Plan (YAML)"));
  const submit = async (e) => {
    e.preventDefault();
    out.replaceChildren();
    try {
      const body = kind === "task" ? { task: text.value }
        : { plan: (await api("/v1/plans/parse", { method: "POST", body: { text: text.value }, signal })).plan };
      if (kind === "task" && profile.pick.value) body.profile = profile.pick.value;
      if (name.value.trim()) body.name = name.value.trim();
      if (files.files.length) body.files = await uploadFiles(files.files, signal);
      const made = await api("/v1/runs", { method: "POST", body, signal });
      location.hash = `#/runs/${made.run_id}`;
    } catch (err) { if (err.name !== "AbortError") out.replaceChildren(errorBox(err)); }
  };
  view.replaceChildren(el("a", { href: "#/runs" }, "← runs"), el("h1", {}, "New run"),
    el("form", { class: "card stack", id: "new-run-form", onsubmit: submit }, tabs, text, profile.box, name,
      el("label", { class: "row-flex muted" }, "input files (placed in the run's workspace)", files),
      el("div", { class: "row-flex" }, el("button", { class: "primary", type: "submit", id: "new-submit" }, "Start run")), out));
}

// Each file goes up once (POST /v1/uploads); the run names their ids in `files`.
async function uploadFiles(fileList, signal) {
  const form = new FormData();
  for (const f of fileList) form.append("files", f, f.name);
  const data = await api("/v1/uploads", { method: "POST", body: form, signal });
  return data.uploads.map((u) => u.id);
}

// ---------------------------------------------------------------- run page

function runPage(runId, signal) {
  const state = { detail: null, version: null, selected: null, live: "connecting…", calls: [], inputs: [], artifacts: [], liveOut: new Map(), openCalls: new Map(), diff: null, diffFrom: "", diffTo: "", replay: null, runDiff: null };
  view.replaceChildren(el("p", { class: "muted" }, "loading run…"));
  let pending = null;
  const ticker = setInterval(tickElapsed, 1000);
  signal.addEventListener("abort", () => clearInterval(ticker));

  async function load() {
    try {
      state.detail = await api(`/v1/runs/${runId}`, { signal });
      const [calls, inputs, artifacts] = await Promise.all(["model-calls", "inputs", "artifacts"].map((p) => api(`/v1/runs/${runId}/${p}`, { signal })));
      Object.assign(state, { calls: calls.model_calls, inputs: inputs.inputs, artifacts: artifacts.files });
      render(state);
    } catch (err) {
      if (err.name !== "AbortError" && err.status !== 401) view.replaceChildren(errorBox(err));
    }
  }
  function soon() { if (!pending) pending = setTimeout(() => { pending = null; load(); }, 120); }
  load();
  streamEvents(runId, signal, (event) => {
    state.live = `live · event ${event.id} ${event.type}`;
    const live = document.getElementById("live");
    if (live) live.textContent = state.live;
    if (event.type === "step_output" || event.type === "step_output_truncated") appendLive(state.liveOut, event);
    else soon();
  });

  function render(s) {
    const d = s.detail;
    const versions = d.plans.map((p) => p.version);
    if (s.version === null || !versions.includes(s.version)) s.version = versions[versions.length - 1];
    const plan = d.plans.find((p) => p.version === s.version) || d.plans[0];
    const latest = finalSteps(latestAttempts(d.steps, plan), plan, d.run, s.version === versions[versions.length - 1]);
    const failed = failedAttempt(d);
    if (!s.selected && failed) s.selected = failed.step_id;
    if (!s.selected && plan && plan.steps.length) s.selected = plan.steps[0].id;
    const select = (stepId) => { s.selected = stepId; render(s); };
    const compare = async (from, to) => {
      Object.assign(s, { diffFrom: from, diffTo: to });
      const query = new URLSearchParams(Object.entries({ from, to }).filter(([, v]) => v));
      try { s.diff = await api(`/v1/runs/${runId}/diff?${query}`, { signal }); } catch (err) { s.diff = { error: err }; }
      render(s);
      document.getElementById("diff-card").scrollIntoView({ block: "start" });
    };
    const travel = timeTravel(runId, d.run, s, render, signal);
    view.replaceChildren(
      el("div", { class: "row-flex" }, el("a", { href: "#/runs" }, "← runs"), el("span", { id: "live", class: "muted" }, s.live)),
      el("div", { class: "row-flex run-head" }, el("h1", {}, d.run.name || "run", " ", badge(d.run.status)), runActions(d.run, load), travel.actions),
      answerBox(d.run) || "",
      causeBox(d.run, failed) || "",
      el("div", { class: "card kv" },
        el("span", { class: "muted" }, "run id"), el("span", { class: "mono", id: "run-id" }, d.run.id),
        el("span", { class: "muted" }, "trace id"), el("span", { class: "mono" }, d.run.trace_id),
        el("span", { class: "muted" }, "created"), el("span", {}, fmtTime(d.run.created_at)),
        el("span", { class: "muted" }, "finished"), el("span", {}, fmtTime(d.run.finished_at)),
        d.run.request && d.run.request.task ? [el("span", { class: "muted" }, "task"), el("span", { id: "run-task" }, d.run.request.task)] : null,
        d.run.request && d.run.request.fork ? [el("span", { class: "muted" }, "forked from"), el("span", { id: "run-fork" },
          el("a", { href: `#/runs/${d.run.request.fork.run_id}`, class: "mono" }, d.run.request.fork.run_id), ` at step ${d.run.request.fork.at}`,
          d.run.request.fork.profile ? ` with profile ${d.run.request.fork.profile}` : "")] : null,
        d.run.request && d.run.request.replay ? [el("span", { class: "muted" }, "replay of"), el("span", { id: "run-replay-of" },
          el("a", { href: `#/runs/${d.run.request.replay.run_id}`, class: "mono" }, d.run.request.replay.run_id))] : null,
        s.inputs.length ? [el("span", { class: "muted" }, "inputs"), el("span", { class: "mono", id: "run-inputs" }, s.inputs.map((f) => `${f.path} (${fmtBytes(f.size_bytes)})`).join(", "))] : null,
        d.run.error ? el("span", { class: "muted" }, "error") : null, d.run.error ? el("span", {}, d.run.error) : null),
      ...d.warnings.map(warningBox),
      ...d.steps.filter((st) => st.waiting_approval).map((st) => approvalBox(runId, st, stepSpec(d, st), reviewFiles(s.artifacts, d.steps), load)),
      el("div", { class: "grid" },
        el("div", {},
          el("div", { class: "card dag" }, el("h2", {}, "Plan"),
            versions.length > 1 ? el("div", { class: "tabs" }, ...d.plans.map((p) => el("button", {
              class: `chip${p.version === s.version ? " on" : ""}`, "data-version": p.version,
              onclick: () => { s.version = p.version; render(s); } }, `v${p.version}${p.reason ? ` · ${p.reason}` : ""}`))) : null,
            plan ? dagView(plan, latest, s.selected, select) : el("p", { class: "muted" }, "no plan yet")),
          el("div", { class: "card timeline" }, el("h2", {}, "Timeline"), timelineView(d.steps, s.selected, select))),
        el("div", {}, stepPanel(d.steps.filter((st) => st.step_id === s.selected), s.liveOut, compare, travel.fork))),
      filesView(runId, s.artifacts),
      diffCard(d.steps, s, compare),
      ...travel.cards.filter(Boolean),
      d.model_calls.length ? el("div", { class: "card", id: "agent-decisions" }, el("h2", {}, "Agent decisions"),
        ...d.model_calls.map((c) => el("details", {}, el("summary", {}, `${c.purpose || "call"} · ${c.model} · ${fmtMs(c.latency_ms)}${c.error ? ` · error: ${c.error}` : ""}`),
          el("pre", { class: "decision" }, JSON.stringify(c.response, null, 2))))) : "",
      s.calls.length ? modelCallsView(runId, s.calls, s.openCalls, signal) : "");
  }
}

function runActions(run, reload) {
  const out = el("span", { class: "row-flex actions" });
  const act = (verb, label, cls) => el("button", { class: cls, id: `${verb}-run`, onclick: async (e) => {
    e.target.disabled = true;
    try { await api(`/v1/runs/${run.id}/${verb}`, { method: "POST" }); reload(); }
    catch (err) { out.append(errorBox(err)); e.target.disabled = false; }
  } }, label);
  if (!TERMINAL.includes(run.status)) out.append(act("cancel", "Cancel run", "reject"));
  if (run.status === "DEAD" || run.status === "FAILED") out.append(act("retry", "Retry", "primary"));
  return out;
}

// The answer (when the API carries one): an agent's final answer or a plan's declared result.
function answerBox(run) {
  if (run.answer === null || run.answer === undefined) return null;
  const text = typeof run.answer === "string" ? run.answer : JSON.stringify(run.answer, null, 2);
  return el("div", { class: "card answer", id: "run-answer" }, el("h2", {}, "Answer"), el("pre", { class: "answer-text" }, text));
}

// The latest failed attempt of a failed run: the step the page opens on.
function failedAttempt(d) {
  if (!["FAILED", "DEAD"].includes(d.run.status)) return null;
  const bad = d.steps.filter((st) => st.status === "FAILED" || st.status === "TIMEOUT");
  return bad.length ? bad[bad.length - 1] : null;
}

function causeBox(run, failed) {
  if (!["FAILED", "DEAD"].includes(run.status)) return null;
  const lines = failed && failed.stderr ? failed.stderr.trimEnd().split("\n").slice(-8).join("\n") : "";
  return el("div", { class: "error-box cause", id: "run-cause" },
    el("div", {}, el("b", {}, failed ? `step ${failed.step_id} failed (attempt ${attemptLabel(failed)})` : "the run failed"),
      failed && failed.error ? `: ${failed.error}` : run.error ? `: ${run.error}` : ""),
    lines ? el("pre", { class: "err cause-stderr" }, lines) : null);
}

function stepSpec(d, attempt) {
  for (const p of d.plans.slice().reverse()) {
    const spec = ((p.spec && p.spec.steps) || []).find((st) => st.id === attempt.step_id);
    if (spec) return spec;
  }
  return null;
}

function modelCallsView(runId, calls, opened, signal) {
  const total = (k) => calls.reduce((n, c) => n + (c[k] || 0), 0);
  const priced = calls.filter((c) => c.cost_usd !== null);
  return el("div", { class: "card", id: "model-calls" },
    el("h2", {}, `Model calls · ${fmtTokens(total("prompt_tokens") + total("completion_tokens"))} tokens · ${priced.length ? fmtCost(total("cost_usd")) : "cost unknown"}`),
    el("div", { class: "table-wrap" }, el("table", {},
      el("thead", {}, el("tr", {}, ...["purpose", "model", "tokens in/out", "cost", "latency", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...calls.map((c) => callRow(runId, c, opened, signal))))));
}

// An opened call stays open: the run page is drawn again on every event of the run.
function callRow(runId, c, opened, signal) {
  const cell = el("td", { class: "call-cell" });
  const show = el("button", { class: "show-call", "data-call": c.id, onclick: async () => {
    show.disabled = true;
    try {
      opened.set(c.id, await api(`/v1/runs/${runId}/model-calls/${c.id}`, { signal }));
      const now = document.querySelector(`#model-calls tr[data-call-row="${c.id}"] td.call-cell`);
      showCall(now || cell, opened.get(c.id));  // drawn again while it loaded: the new row
    } catch (err) { cell.replaceChildren(errorBox(err)); }
  } }, "prompt & reply");
  if (opened.has(c.id)) showCall(cell, opened.get(c.id));
  else cell.append(show);
  return el("tr", { "data-call-row": c.id },
    el("td", {}, c.purpose || "call", c.error ? el("span", { class: "muted" }, ` · error`) : null), el("td", { class: "mono" }, c.model),
    el("td", { class: "num" }, `${c.prompt_tokens}/${c.completion_tokens}`), el("td", { class: "num" }, fmtCost(c.cost_usd)),
    el("td", { class: "num" }, fmtMs(c.latency_ms)), cell);
}

function showCall(cell, full) {
  cell.replaceChildren(el("h2", {}, "Prompt"), el("pre", { class: "call-prompt" }, (full.messages || []).map((m) => `[${m.role}]\n${typeof m.content === "string" ? m.content : JSON.stringify(m.content, null, 2)}`).join("\n\n")),
    el("h2", {}, "Reply"), el("pre", { class: "call-reply" }, full.error ? `error: ${full.error}` : JSON.stringify(full.response, null, 2)));
}

function latestAttempts(steps, plan) {
  const byStep = {};
  for (const st of steps) {
    if (plan && st.execution_id && byStep[st.step_id] && byStep[st.step_id].attempt > st.attempt) continue;
    byStep[st.step_id] = st;
  }
  return byStep;
}

// A `final` step is no sandbox attempt (the agent renders the answer): on the plan that
// finished the run, it succeeded with the run.
function finalSteps(latest, plan, run, newest) {
  if (!plan || !newest || run.status !== "SUCCEEDED") return latest;
  const specs = (plan.spec && plan.spec.steps) || plan.steps;
  for (const step of specs) if (step.kind === "final" && !latest[step.id]) latest[step.id] = { status: "SUCCESS", step_id: step.id };
  return latest;
}

function nodeStatus(attempt) {
  if (!attempt) return "NOT_STARTED";
  if (attempt.waiting_approval) return "WAITING";
  return attempt.status;
}

function dagView(plan, latest, selected, select) {
  const depth = {};
  const order = plan.steps.map((s) => s.id);
  const deps = Object.fromEntries(plan.steps.map((s) => [s.id, s.depends_on || []]));
  const depthOf = (id, seen = new Set()) => {
    if (depth[id] !== undefined) return depth[id];
    if (seen.has(id)) return 0;
    seen.add(id);
    depth[id] = deps[id].length ? 1 + Math.max(...deps[id].map((d) => depthOf(d, seen))) : 0;
    return depth[id];
  };
  order.forEach((id) => depthOf(id));
  const columns = {};
  for (const id of order) (columns[depth[id]] = columns[depth[id]] || []).push(id);
  const W = 150, H = 34, GX = 50, GY = 18, pos = {};
  for (const [col, ids] of Object.entries(columns)) ids.forEach((id, row) => { pos[id] = { x: 10 + col * (W + GX), y: 10 + row * (H + GY) }; });
  const width = 20 + (Math.max(...Object.keys(columns).map(Number)) + 1) * (W + GX);
  const height = 20 + Math.max(...Object.values(columns).map((c) => c.length)) * (H + GY);
  const edges = [];
  for (const id of order) for (const dep of deps[id]) {
    if (!pos[dep]) continue;
    const a = pos[dep], b = pos[id];
    edges.push(svg("path", { class: "edge", d: `M${a.x + W},${a.y + H / 2} C${a.x + W + GX / 2},${a.y + H / 2} ${b.x - GX / 2},${b.y + H / 2} ${b.x},${b.y + H / 2}` }));
  }
  const nodes = order.map((id) => {
    const status = nodeStatus(latest[id]);
    const label = id.length > 19 ? `${id.slice(0, 18)}…` : id;
    return svg("g", { class: `node n-${status}${id === selected ? " selected" : ""}`, "data-step": id, "data-status": status,
      transform: `translate(${pos[id].x},${pos[id].y})`, onclick: () => select(id) },
    svg("title", {}, document.createTextNode(`${id}: ${status}`)),
    svg("rect", { width: W, height: H, rx: 6 }),
    (() => { const t = svg("text", { x: 10, y: 21 }); t.textContent = label; return t; })());
  });
  const defs = svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
    svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#b8b8c2" })));
  return svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, id: "dag" }, defs, ...edges, ...nodes);
}

function timelineView(steps, selected, select) {
  const times = steps.filter((s) => s.started_at).map((s) => new Date(s.started_at).getTime());
  if (!times.length) return el("p", { class: "muted" }, "no step has started yet");
  const start = Math.min(...times);
  const end = Math.max(...steps.filter((s) => s.started_at).map((s) => new Date(s.finished_at || Date.now()).getTime()), start + 1);
  return el("div", {}, ...steps.map((s) => {
    const from = s.started_at ? new Date(s.started_at).getTime() : null;
    const to = s.finished_at ? new Date(s.finished_at).getTime() : Date.now();
    const bar = from === null ? null : el("div", { class: `bar s-${s.waiting_approval ? "WAITING" : s.status}`,
      style: `left:${(100 * (from - start)) / (end - start)}%;width:${Math.max(0.5, (100 * (to - from)) / (end - start))}%` });
    return el("div", { class: `row${s.step_id === selected ? " selected" : ""}`, "data-timeline": s.step_id, onclick: () => select(s.step_id) },
      el("span", { class: "mono" }, `${s.step_id}${s.attempt > 1 ? ` #${s.attempt}` : ""}`),
      el("div", { class: "track" }, bar), el("span", { class: "muted" }, durationOf(s)));
  }));
}

function warningBox(w) { return el("div", { class: "warning", "data-warning": w.kind }, el("b", {}, w.kind.replace("_", " ")), w.message); }

function approvalBox(runId, step, spec, files, reload) {
  const comment = el("input", { type: "text", placeholder: "comment (optional)", size: 40 });
  const decide = async (verb) => {
    try {
      await api(`/v1/runs/${runId}/steps/${encodeURIComponent(step.step_id)}/${verb}`, { method: "POST", body: { comment: comment.value || null } });
      reload();
    } catch (err) { box.append(errorBox(err)); }
  };
  const box = el("div", { class: "card approval", "data-approval": step.step_id },
    el("h2", {}, `Step ${step.step_id} is waiting for your approval`),
    approvalPrompt(spec),
    files.length ? [el("h2", {}, "Files under review"), el("ul", { class: "approval-files mono" }, ...files.map((f) => el("li", {}, f)))] : null,
    el("div", { class: "row-flex" }, comment,
      el("button", { class: "approve", id: `approve-${step.step_id}`, onclick: () => decide("approve") }, "Approve"),
      el("button", { class: "reject", id: `reject-${step.step_id}`, onclick: () => decide("reject") }, "Reject")));
  return box;
}

function approvalPrompt(spec) {
  const input = (spec && spec.input) || {};
  const prompt = input.prompt || input.question || (spec && spec.description);
  return prompt ? el("p", { class: "approval-prompt" }, prompt) : el("p", { class: "muted" }, "the step gives no prompt");
}

function stepPanel(attempts, liveOut, compare, fork) {
  if (!attempts.length) return el("div", { class: "card" }, el("p", { class: "muted" }, "this step has not been queued yet"));
  return el("div", {}, ...attempts.slice().reverse().map((s) => {
    const r = s.resources;
    const limits = r.limits ? Object.entries(r.limits).map(([k, v]) => `${k}=${v}`).join(" ") : "–";
    return el("div", { class: "card", "data-attempt": `${s.step_id}#${s.attempt}` },
      el("h2", {}, `${s.step_id} · attempt ${attemptLabel(s)} `, badge(s.waiting_approval ? "WAITING" : s.status)),
      ...s.warnings.map(warningBox),
      el("div", { class: "kv" },
        el("span", { class: "muted" }, "tool"), el("span", {}, s.tool || "–"),
        el("span", { class: "muted" }, s.status === "RUNNING" ? "elapsed" : "duration"), el("span", {}, durationOf(s)),
        el("span", { class: "muted" }, "memory peak"), el("span", {}, r.memory_used_mb === null ? "–" : `${r.memory_used_mb.toFixed(1)} MB`),
        el("span", { class: "muted" }, "cpu"), el("span", {}, r.cpu_usage_percent === null ? "–" : `${r.cpu_usage_percent}%`),
        el("span", { class: "muted" }, "limits"), el("span", { class: "mono" }, limits),
        el("span", { class: "muted" }, "network"), el("span", {}, r.allow_domains.length ? r.allow_domains.join(", ") : "none"),
        el("span", { class: "muted" }, "exit code"), el("span", {}, s.exit_code === null ? "–" : s.exit_code),
        el("span", { class: "muted" }, "snapshot"), el("span", {}, s.snapshot_id ? [snapshotLink(s.snapshot_id), " ",
          el("button", { class: "link compare-previous", onclick: () => compare("", s.execution_id) }, "compare with previous")] : "–"),
        el("span", { class: "muted" }, "files"), el("span", { class: "mono" }, s.files.length ? s.files.map((f) => `${f.change} ${f.path}`).join(", ") : "–")),
      s.error ? el("div", { class: "error-box" }, s.error) : null,
      s.code ? [el("h2", {}, "Code"), el("pre", { class: "code" }, s.code)] : null,
      fork && s.code && s.attempt === Math.max(...attempts.map((a) => a.attempt)) ? forkBox(s, fork) : null,
      s.status === "RUNNING" ? liveView(s.execution_id, liveOut) : [
        el("h2", {}, "stdout"), el("pre", { class: "stdout" }, s.stdout || ""),
        s.stderr ? [el("h2", {}, "stderr"), el("pre", { class: "err stderr" }, s.stderr)] : null],
      s.decision ? [el("h2", {}, "Decision record"), el("pre", { class: "decision" }, JSON.stringify(s.decision, null, 2))] : null);
  }));
}

// ---------------------------------------------------------------- files and live output

const fmtBytes = (n) => (n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} KB` : `${(n / 1048576).toFixed(1)} MB`);
const LIVE_LINES = 200; // a running step's live output keeps its last lines in the page

// What an approver is asked to sign off: the run's kept outputs, else the files the last
// step that wrote any wrote.
function reviewFiles(artifacts, steps) {
  if (artifacts.length) return artifacts.map((f) => `${f.path} (${fmtBytes(f.size_bytes)})`);
  const wrote = steps.filter((st) => st.files && st.files.length);
  return wrote.length ? wrote[wrote.length - 1].files.map((f) => `${f.change} ${f.path}`) : [];
}

// Links cannot carry the Authorization header: fetch with it, then save the blob.
async function download(path, filename) {
  const res = await fetch(path, { headers: authHeaders() });
  if (!res.ok) throw new Error(`download of ${filename} failed: HTTP ${res.status}`);
  const url = URL.createObjectURL(await res.blob());
  const a = el("a", { href: url, download: filename });
  document.body.append(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function downloadButton(label, path, filename, attrs) {
  const button = el("button", { ...attrs, onclick: async () => {
    try { await download(path, filename); } catch (err) { button.after(errorBox(err)); }
  } }, label);
  return button;
}

function filesView(runId, files) {
  if (!files.length) return "";
  const base = `/v1/runs/${runId}/artifacts`;
  const rows = files.map((f) => el("tr", { "data-file": f.path },
    el("td", { class: "mono" }, f.path), el("td", { class: "num" }, fmtBytes(f.size_bytes)),
    el("td", { class: "mono", title: f.sha256 }, f.sha256.slice(0, 12)), el("td", {}, f.step_id || "–"),
    el("td", {}, downloadButton("⤓", `${base}/${f.path.split("/").map(encodeURIComponent).join("/")}`, f.path.split("/").pop(), { class: "download-file" }))));
  return el("div", { class: "card", id: "run-files" },
    el("div", { class: "row-flex run-head" }, el("h2", {}, `Files · ${files.length}`),
      downloadButton("download all (zip)", `${base}?zip=1`, `run-${runId}.zip`, { id: "download-zip" })),
    el("div", { class: "table-wrap" }, el("table", {},
      el("thead", {}, el("tr", {}, ...["path", "size", "sha256", "step", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows))));
}

// step_output events of a running step, kept per execution and stream (last LIVE_LINES lines).
function appendLive(liveOut, event) {
  const p = event.data.payload || event.data;
  const out = liveOut.get(p.execution_id) || { stdout: [""], stderr: [""] };
  liveOut.set(p.execution_id, out);
  const lines = out[p.stream || "stderr"];
  const parts = (p.stream ? p.text : `[${p.message}]\n`).split("\n");
  lines[lines.length - 1] += parts[0];
  lines.push(...parts.slice(1));
  if (lines.length > LIVE_LINES) lines.splice(0, lines.length - LIVE_LINES);
  for (const stream of ["stdout", "stderr"]) {
    const pre = document.querySelector(`pre.live-${stream}[data-exec="${p.execution_id}"]`);
    if (pre) { pre.textContent = out[stream].join("\n"); pre.scrollTop = pre.scrollHeight; }
  }
}

function liveView(executionId, liveOut) {
  const out = liveOut.get(executionId) || { stdout: [""], stderr: [""] };
  return [el("h2", {}, "stdout ", el("span", { class: "muted" }, "(live)")),
    el("pre", { class: "live-stdout", "data-exec": executionId }, out.stdout.join("\n")),
    el("h2", {}, "stderr ", el("span", { class: "muted" }, "(live)")),
    el("pre", { class: "err live-stderr", "data-exec": executionId }, out.stderr.join("\n"))];
}

// ---------------------------------------------------------------- workspace diff

// Two step attempts' snapshots compared; every name and line is a text node (never HTML).
// ---------------------------------------------------------------- time travel: fork, replay, compare

function timeTravel(runId, run, s, render, signal) {
  const ended = TERMINAL.includes(run.status);
  const parent = run.request && run.request.fork ? run.request.fork.run_id : null;
  const call = async (e, work) => {
    e.target.disabled = true;
    try { await work(); } catch (err) { console.error("time travel", err); e.target.after(errorBox(err)); }
    e.target.disabled = false;
  };
  const replay = (e) => call(e, async () => {
    s.replay = await api(`/v1/runs/${runId}/replay`, { method: "POST", signal });
    render(s);
    document.getElementById("replay-report").scrollIntoView({ block: "start" });
  });
  const compareWith = (e, other) => call(e, async () => {
    s.runDiff = await api(`/v1/runs/${other}/compare/${runId}`, { signal });
    render(s);
    document.getElementById("run-diff").scrollIntoView({ block: "start" });
  });
  const agent = Boolean(run.request && (run.request.task !== undefined || run.request.agent));
  const fork = async (step, change, button) => {
    button.disabled = true;
    try {
      const body = agent ? { at: step, profile: change || null } : { at: step, set: { [`${step}.code`]: change } };
      const made = await api(`/v1/runs/${runId}/fork`, { method: "POST", body, signal });
      location.hash = `#/runs/${made.run_id}`;
    } catch (err) { button.after(errorBox(err)); button.disabled = false; }
  };
  const actions = el("span", { class: "row-flex actions" },
    ended && !(run.request && run.request.replay) ? el("button", { id: "replay-run", onclick: replay }, "Replay") : null,
    parent ? el("button", { id: "compare-parent", onclick: (e) => compareWith(e, parent) }, "Compare with parent") : null);
  const cards = [s.replay ? replayCard(s.replay) : null, s.runDiff ? runDiffCard(s.runDiff) : null];
  return { actions, cards, fork: ended ? { go: fork, state: s, agent, signal, rerender: () => render(s) } : null };
}

// The form survives the page's re-renders (live events reload it): its state lives in the page's.
function forkBox(attempt, fork) {
  if (fork.agent) return agentForkBox(attempt, fork);
  const st = fork.state, step = attempt.step_id;
  st.forkCode = st.forkCode || {};
  const code = el("textarea", { id: `fork-code-${step}`, class: "mono", rows: 6, oninput: (e) => { st.forkCode[step] = e.target.value; } },
    st.forkCode[step] ?? attempt.code);
  const go = el("button", { class: "primary", id: `fork-${step}`, onclick: () => fork.go(step, code.value, go) }, "Fork from here");
  return el("details", { class: "fork-box", open: st.forkOpen === step, ontoggle: (e) => { st.forkOpen = e.target.open ? step : null; } },
    el("summary", {}, "Fork from here: keep the steps before, run this one again"),
    el("p", { class: "muted" }, "A new run keeps every step that finished before this one, starts from the workspace as it was just before it, and runs it with this code."),
    code, go);
}

// A run the agent scheduled goes on from a step with another profile's model: what the
// agent saw before the step is kept, its model calls from the step on go to that profile.
function agentForkBox(attempt, fork) {
  const st = fork.state, step = attempt.step_id;
  const pick = el("select", { id: `fork-profile-${step}`, onchange: (e) => { st.forkProfile = e.target.value; } },
    el("option", { value: "" }, "the run's own model"),
    ...(st.profiles || []).map((p) => el("option", { value: p.name, selected: st.forkProfile === p.name }, `${p.name} (${p.spec.model})`)));
  const load = async (open) => {
    if (!open || st.profiles) return;
    try { st.profiles = (await api("/v1/profiles", { signal: fork.signal })).profiles; } catch (err) { st.profiles = []; }
    fork.rerender();
  };
  if (st.forkOpen === step && !st.profiles) load(true);
  const go = el("button", { class: "primary", id: `fork-${step}`, onclick: () => fork.go(step, document.getElementById(`fork-profile-${step}`).value, go) }, "Fork from here");
  return el("details", { class: "fork-box", open: st.forkOpen === step, ontoggle: (e) => { st.forkOpen = e.target.open ? step : null; load(e.target.open); } },
    el("summary", {}, "Fork from here: keep what the agent saw before this step, go on with another model"),
    el("p", { class: "muted" }, "A new run keeps every model answer and step result from before this step and starts from the workspace as it was just before it; its model calls from here on go to the profile you choose."),
    pick, go);
}

function replayCard(r) {
  const first = r.first_difference;
  return el("div", { class: "card", id: "replay-report" }, el("h2", {}, "Replay"),
    el("p", {}, `${r.matches} of ${r.replayed} replayed steps match · ${r.model_calls} model calls made · recorded as run `,
      el("a", { href: `#/runs/${r.replay_run_id}`, class: "mono", id: "replay-run-link" }, r.replay_run_id)),
    el("div", { class: "kv" }, ...r.steps.flatMap((st) => [el("span", { class: "mono" }, st.step_id),
      el("span", { "data-replay": st.step_id, "data-match": st.replayed ? String(st.match) : "skipped" },
        st.replayed ? (st.match ? "match" : "differs") : st.why)])),
    first ? [el("h2", {}, `First difference: ${first.step_id}`), first.stdout_diff ? diffText(first.stdout_diff) : null,
      el("p", { class: "muted" }, ["added", "removed", "changed"].filter((k) => (first.files[k] || []).length).map((k) => `${k}: ${first.files[k].join(", ")}`).join(" · "))] : null);
}

function runDiffCard(d) {
  const side = (x) => (x ? `${x.status} · exit ${x.exit_code === null ? "–" : x.exit_code}${x.inherited_from ? " · kept" : ""}` : "absent");
  return el("div", { class: "card", id: "run-diff" }, el("h2", {}, "Compare runs"),
    el("p", { class: "muted" }, `a: `, el("a", { href: `#/runs/${d.run_a}`, class: "mono" }, d.run_a), ` · b: `, el("a", { href: `#/runs/${d.run_b}`, class: "mono" }, d.run_b)),
    el("table", { class: "run-diff" },
      el("tr", {}, el("th", {}, "step"), el("th", {}, "a"), el("th", {}, "b"), el("th", {}, "")),
      ...d.steps.map((st) => el("tr", { "data-step-diff": st.step_id, "data-same": String(st.same) },
        el("td", { class: "mono" }, st.step_id), el("td", {}, side(st.a)), el("td", {}, side(st.b)),
        el("td", {}, st.same ? "same" : "differs")))),
    ...d.steps.filter((st) => !st.same).map((st) => el("details", { open: true, "data-step-detail": st.step_id },
      el("summary", {}, `${st.step_id} differs`),
      st.stdout && !st.stdout.same ? diffText(st.stdout.diff) : null,
      st.files && st.files.files ? st.files.files.map((f) => [el("p", { class: "mono" }, `file ${f.path}`), f.diff ? diffText(f.diff) : null]) : null)));
}

function diffCard(steps, s, compare) {
  const snapped = steps.filter((st) => st.snapshot_id);
  if (!snapped.length) return "";
  const option = (st, chosen) => el("option", { value: st.execution_id, selected: st.execution_id === chosen }, `${st.step_id} · attempt ${st.attempt}`);
  const from = el("select", { id: "diff-from" }, el("option", { value: "" }, "just before it"), ...snapped.map((st) => option(st, s.diffFrom)));
  const to = el("select", { id: "diff-to" }, ...snapped.map((st) => option(st, s.diffTo || snapped[snapped.length - 1].execution_id)));
  return el("div", { class: "card", id: "diff-card" }, el("h2", {}, "Compare workspace"),
    el("div", { class: "row-flex" }, el("label", {}, "from ", from), el("label", {}, "to ", to),
      el("button", { id: "diff-compare", onclick: () => compare(from.value, to.value) }, "compare")),
    s.diff ? diffView(s.diff) : "");
}

const sideLabel = (side) => (side.source === "empty" ? "an empty workspace" : `${side.step_id} · attempt ${side.attempt}${side.source === "pre_snapshot" ? " (before it ran)" : ""}`);
const sizeChange = (f) => [f.size_before, f.size_after].map((n) => (n === null ? "–" : fmtBytes(n))).join(" → ");

function diffView(d) {
  if (d.error) return el("div", { id: "workspace-diff" }, errorBox(d.error));
  const sum = d.summary;
  return el("div", { id: "workspace-diff" },
    el("p", { class: "muted" }, `from ${sideLabel(d.from)} to ${sideLabel(d.to)}: ${sum.added} added, ${sum.removed} removed, ${sum.changed} changed${d.truncated ? " (bounded: not everything is shown)" : ""}`),
    ...d.files.map((f) => el("details", { class: "diff-file", "data-diff-file": f.path, "data-change": f.change, open: Boolean(f.diff) },
      el("summary", {}, el("span", { class: `chg chg-${f.change}` }, f.change), " ", el("span", { class: "mono diff-path" }, f.path), " ",
        el("span", { class: "muted" }, [f.type_after || f.type_before, sizeChange(f), f.binary ? "binary" : null, f.note].filter(Boolean).join(" · "))),
      f.diff ? diffText(f.diff) : null)));
}

function diffText(text) {
  const kind = (line) => (line.startsWith("@@") ? "hunk" : line.startsWith("+++") || line.startsWith("---") ? "head" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : null);
  return el("pre", { class: "diff" }, ...text.replace(/\n$/, "").split("\n").map((line) => el("span", { class: kind(line) }, `${line}\n`)));
}

function snapshotLink(id) {
  return el("a", { href: "#", class: "mono", onclick: async (e) => {
    e.preventDefault();
    const res = await fetch(`/v1/snapshots/${id}/download`, { headers: authHeaders() });
    if (!res.ok) { alert(`download failed: HTTP ${res.status}`); return; }
    const url = URL.createObjectURL(await res.blob());
    const a = el("a", { href: url, download: `snapshot-${id}.tar.gz` });
    document.body.append(a); a.click(); a.remove(); URL.revokeObjectURL(url);
  } }, `${id.slice(0, 8)} ⤓`);
}

// Server-sent events over fetch (EventSource cannot send the Authorization header).
// Reconnects with Last-Event-ID, so no event is missed or repeated.
async function streamEvents(runId, signal, onEvent) {
  let last = 0;
  while (!signal.aborted) {
    try {
      const res = await fetch(`/v1/runs/${runId}/events/stream`, { headers: { ...authHeaders(), "Last-Event-ID": String(last) }, signal });
      if (!res.ok) { await sleep(2000); continue; }
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const chunk = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const event = {};
          for (const line of chunk.split("\n")) {
            if (line.startsWith("id: ")) event.id = Number(line.slice(4));
            else if (line.startsWith("event: ")) event.type = line.slice(7);
            else if (line.startsWith("data: ")) event.data = JSON.parse(line.slice(6));
          }
          if (event.id) { last = event.id; onEvent(event); }
        }
      }
    } catch (err) {
      if (signal.aborted) return;
    }
    await sleep(1000);
  }
}

// ---------------------------------------------------------------- knowledge

function knowledgePage(signal) {
  const query = el("input", { type: "search", id: "kb-query", placeholder: "ask the knowledge base…", size: 50 });
  const collection = el("select", { id: "kb-collection" }, el("option", { value: "" }, "all collections"));
  const results = el("div", { id: "kb-results" });
  const docs = el("tbody", {});
  const form = el("form", { class: "card row-flex", onsubmit: async (e) => {
    e.preventDefault();
    results.replaceChildren(el("p", { class: "muted" }, "searching…"));
    try {
      const body = { query: query.value, k: 8 };
      if (collection.value) body.collections = [collection.value];
      const data = await api("/v1/knowledge/search", { method: "POST", body, signal });
      results.replaceChildren(...(data.hits.length ? data.hits.map(hitView) : [el("p", { class: "muted" }, "no hits")]));
    } catch (err) { results.replaceChildren(errorBox(err)); }
  } }, query, collection, el("button", { class: "primary", type: "submit" }, "Search"));
  view.replaceChildren(el("h1", {}, "Knowledge"), form, results, el("h2", {}, "Documents"),
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {}, ...["collection", "source", "type", "chunks", "updated"].map((h) => el("th", {}, h)))), docs)));
  api("/v1/knowledge/documents?limit=500", { signal }).then((data) => {
    for (const c of data.collections) collection.append(el("option", { value: c.name }, `${c.name} (${c.documents})`));
    docs.replaceChildren(...data.documents.map((d) => el("tr", {}, el("td", {}, d.collection), el("td", { class: "mono" }, d.source),
      el("td", {}, d.source_type), el("td", {}, d.n_chunks), el("td", {}, fmtTime(d.updated_at)))));
  }).catch((err) => { if (err.name !== "AbortError" && err.status !== 401) docs.replaceChildren(el("tr", {}, el("td", {}, errorBox(err)))); });
}

function hitView(hit) {
  const scores = Object.entries(hit.scores).map(([k, v]) => `${k} ${v.toFixed(3)}`).join(" · ");
  return el("div", { class: "hit" },
    el("div", {}, el("b", {}, hit.document.title || hit.document.source), el("span", { class: "muted" }, ` · ${hit.document.collection} · chunk ${hit.ordinal} · ${scores}`)),
    hit.heading ? el("div", { class: "muted" }, hit.heading) : null,
    el("div", {}, hit.content.length > 600 ? `${hit.content.slice(0, 600)}…` : hit.content));
}

// ---------------------------------------------------------------- memory

// Forgetting deletes for good: the first click asks, the second forgets.
function forgetButton(memory, after) {
  const cell = el("span", { class: "row-flex" });
  const ask = el("button", { class: "forget", onclick: () => cell.replaceChildren(
    el("span", {}, "forget for good?"),
    el("button", { class: "reject confirm-forget", onclick: async () => {
      try { await api(`/v1/memory/${memory.id}`, { method: "DELETE" }); after(); }
      catch (err) { cell.append(errorBox(err)); }
    } }, "Forget"),
    el("button", { class: "keep", onclick: () => cell.replaceChildren(ask) }, "Keep")) }, "forget");
  cell.append(ask);
  return cell;
}

function memoryPage(signal) {
  const scopes = el("div", { class: "row-flex", id: "mem-scopes" });
  const rows = el("tbody", { id: "mem-rows" });
  const recallInput = el("input", { type: "search", placeholder: "recall…", size: 40, id: "mem-query" });
  const recallOut = el("div", {});
  let current = null;
  async function show(scope) {
    current = scope;
    for (const b of scopes.querySelectorAll("button")) b.classList.toggle("on", b.dataset.scope === scope);
    const data = await api(`/v1/memory?scope=${encodeURIComponent(scope)}&limit=500`, { signal });
    rows.replaceChildren(...data.memories.map((m) => el("tr", { "data-memory": m.id },
      el("td", {}, m.content), el("td", {}, m.user_id || "–"), el("td", {}, m.kind),
      el("td", {}, m.invalid_at ? "superseded" : "current"), el("td", {}, m.access_count), el("td", {}, fmtTime(m.created_at)),
      el("td", {}, forgetButton(m, () => show(scope))))));
  }
  const recallForm = el("form", { class: "row-flex", onsubmit: async (e) => {
    e.preventDefault();
    if (!current) return;
    const data = await api("/v1/memory/recall", { method: "POST", body: { scope: current, query: recallInput.value, k: 5 } });
    recallOut.replaceChildren(...data.memories.map((m) => el("div", { class: "hit" }, m.content, el("span", { class: "muted" }, ` · ${m.scores.fused.toFixed(3)}`))));
  } }, recallInput, el("button", { type: "submit" }, "Recall"));
  const addScope = el("input", { type: "text", id: "mem-add-scope", placeholder: "scope", size: 12 });
  const addText = el("input", { type: "text", id: "mem-add-content", placeholder: "something to remember", size: 40 });
  const addOut = el("span", {});
  const addForm = el("form", { class: "row-flex", id: "mem-add", onsubmit: async (e) => {
    e.preventDefault();
    addOut.replaceChildren();
    try {
      await api("/v1/memory", { method: "POST", body: { scope: addScope.value.trim() || current, content: addText.value } });
      addText.value = "";
      memoryPage(signal);
    } catch (err) { addOut.replaceChildren(errorBox(err)); }
  } }, addScope, addText, el("button", { type: "submit" }, "Remember"), addOut);
  view.replaceChildren(el("h1", {}, "Memory"), el("div", { class: "card" }, el("h2", {}, "Scopes"), scopes),
    el("div", { class: "card" }, el("h2", {}, "Add a memory"), addForm),
    el("div", { class: "card" }, recallForm, recallOut),
    el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, el("tr", {}, ...["memory", "user", "kind", "state", "recalled", "created", ""].map((h) => el("th", {}, h)))), rows)));
  api("/v1/memory?limit=1", { signal }).then((data) => {
    scopes.replaceChildren(...(data.scopes.length ? data.scopes.map((s) => el("button", { class: "chip", "data-scope": s.scope, onclick: () => show(s.scope) }, `${s.scope} (${s.memories})`))
      : [el("span", { class: "muted" }, "no memories yet")]));
    if (data.scopes.length) show(data.scopes[0].scope);
  }).catch((err) => { if (err.name !== "AbortError" && err.status !== 401) scopes.replaceChildren(errorBox(err)); });
}

route();
