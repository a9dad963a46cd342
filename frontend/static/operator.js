// The operator's console: every call carries the operator token, kept for this tab only.
"use strict";

const TOKEN_KEY = "classroom-operator-token";
const WRONG_TOKEN = "That is not the operator token. Check it for typing mistakes and try again.";
const TOKEN_CHANGED = "The operator token is no longer accepted (it may have been changed). Enter the current one.";
let plots = {};
let shownVersion = null; // the configuration's version on the page: a change that keeps it changed nothing

// common.js's api(), with the operator token (the one kept for this tab, or one being tried).
const call = (method, url, payload, token = sessionStorage.getItem(TOKEN_KEY) || "") =>
  api(method, url, payload, { Authorization: `Bearer ${token}` });

const ratio = (v) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(1)} %`);

// A classroom's own cells: its name, join code and teacher (names repeat; codes do not).
function classroomCells(s, id) {
  const c = s.classrooms[id];
  return c ? [c.name, c.join_code, c.teacher] : [`${id} (deleted)`, "–", "–"];
}

function figuresRows(body, groups, cells = (k) => [k]) {
  body.replaceChildren(
    ...Object.entries(groups).map(([key, f]) =>
      el("tr", {}, ...cells(key).map((text) => el("td", { text })), el("td", { text: `${f.questions}` }),
        el("td", { text: `${f.errors}` }), el("td", { text: ms(f.ttft_p50_ms) }), el("td", { text: ms(f.ttft_p95_ms) }),
        el("td", { text: ratio(f.cache_hit_ratio) }))));
}

function options(select, names, chosen) {
  select.replaceChildren(...names.map((n) => el("option", { text: n, attrs: { value: n } })));
  if (chosen) select.value = chosen;
}

function showBackends(b) {
  const names = Object.keys(b.config.variants).sort();
  options($("active"), names, b.config.active);
  options($("canary-variant"), names.filter((n) => n !== b.config.active), b.config.canary && b.config.canary.variant);
  const canary = b.config.canary ? `; canary: ${b.config.canary.variant} for ${b.config.canary.percent} % of pupils` : "; no canary";
  $("backend-status").textContent = `Active: ${b.config.active}${canary} (configuration version ${b.config.version}).`;
  shownVersion = b.config.version;
  // A variant that fell over after the switch: said here, while each pupil's question gets a 503 with a sentence.
  const serving = b.replicas.filter((r) => r.variants.includes(b.config.active) && r.healthy);
  $("backend-down").textContent = serving.length ? "" :
    `No replica of the active variant ${b.config.active} is healthy: pupils' questions get "cannot be reached right now". Switch to a variant that answers, or start one of its replicas.`;
  $("variant-list").replaceChildren(...names.map((n) =>
    el("li", { text: `${n}: ${b.config.variants[n].description || "(no description in the configuration)"}` })));
  $("replicas").replaceChildren(
    ...b.replicas.map((r) => {
      const v = r.vllm;
      const hits = v.prefix_cache_queries ? ratio(v.prefix_cache_hits / v.prefix_cache_queries) : "–";
      return el("tr", {}, el("td", { text: r.variants.join(", ") }), el("td", { text: r.url }),
        el("td", { className: r.healthy ? "up" : "down", text: r.healthy ? "healthy" : `down: ${r.error}` }),
        el("td", { text: `${v.running}` }), el("td", { text: `${v.waiting}` }),
        el("td", { text: ratio(v.kv_cache_usage) }), el("td", { text: hits }), warmupCell(r.warmup));
    }));
}

// How a replica's last warm-up burst went: a failed one leaves the replica cold for its first class.
function warmupCell(w) {
  if (!w) return el("td", { text: "–" });
  if (!w.failed) return el("td", { className: "up", text: `warmed in ${w.took_s.toFixed(1)} s` });
  return el("td", { className: "down", text: `${w.failed} of ${w.requests} failed: ${w.error}` });
}

// Colours of the variants' lines, in order; style.css gives the legends' swatches the same (.swatch-N).
const COLOURS = ["#1d4f91", "#c2410c", "#2e7d32", "#6b21a8"];

// The last minute that has a figure, newest first.
function latest(points, value) {
  for (let i = points.length - 1; i >= 0; i--) {
    const v = value(points[i]);
    if (v !== null && v !== undefined) return v;
  }
  return null;
}

// One chart: a line per variant, per minute, and under it a legend that says each line's figures in words.
// `sparse`: minutes without questions have no figure, so each minute that has one is drawn as a dot too.
function plot(id, series, value, describe, { sparse = false, most = null } = {}) {
  const variants = Object.keys(series);
  $(`${id}-legend`).replaceChildren(
    ...variants.map((v, i) => el("li", {}, el("span", { className: `swatch swatch-${i % COLOURS.length}` }),
      el("span", { text: `${v}: ${describe(v, series[v])}` }))));
  if (plots[id]) plots[id].destroy();
  delete plots[id];
  if (!variants.length) return;
  const times = series[variants[0]].map((p) => p.start);
  const data = [times, ...variants.map((v) => series[v].map((p) => value(p)))];
  const opts = {
    width: Math.max(200, $(`${id}-plot`).clientWidth), height: 200, legend: { show: false },
    // From 0, to at least 1 (a quiet hour is a flat line at the bottom), or to `most` (a percentage).
    scales: { y: { range: (u, min, max) => [0, most === null ? Math.max(1, max) : most] } },
    series: [{}, ...variants.map((v, i) => ({
      label: v, stroke: COLOURS[i % COLOURS.length], spanGaps: false,
      points: sparse ? { show: true, size: 7, fill: COLOURS[i % COLOURS.length] } : { show: false },
    }))],
  };
  plots[id] = new uPlot(opts, data, $(`${id}-plot`));
}

function charts(s) {
  const count = (key) => (v, points) => `${points.length ? points[points.length - 1][key] : 0} this minute, ${s.by_variant[v][key]} in the hour`;
  plot("questions", s.series, (p) => p.questions, count("questions"));
  plot("errors", s.series, (p) => p.errors, count("errors"));
  plot("ttft", s.series, (p) => p.ttft_p95_ms,
    (v, points) => `p95 ${ms(latest(points, (p) => p.ttft_p95_ms))} in the latest minute with questions, ${ms(s.by_variant[v].ttft_p95_ms)} over the hour`,
    { sparse: true });
  plot("cache", s.series, (p) => (p.cache_hit_ratio === null ? null : 100 * p.cache_hit_ratio),
    (v, points) => `${ratio(latest(points, (p) => p.cache_hit_ratio))} in the latest minute with questions, ${ratio(s.by_variant[v].cache_hit_ratio)} over the hour`,
    { sparse: true, most: 100 });
  $("no-figures").hidden = Object.keys(s.series).length > 0;
}

async function refresh() {
  const [backends, stats, status] = await Promise.all([
    call("GET", "/api/operator/backends"), call("GET", "/api/operator/stats"), call("GET", "/api/operator/status")]);
  if (backends.status === 403) {
    sessionStorage.removeItem(TOKEN_KEY);
    return showLogin(TOKEN_CHANGED);
  }
  if (!backends.ok || !stats.ok || !status.ok) return ($("backend-error").textContent = await errorMessage(backends.ok ? stats : backends));
  $("backend-error").textContent = "";
  showBackends(await backends.json());
  const st = await status.json();
  const mb = (bytes) => `${(bytes / 2 ** 20).toFixed(0)} MB`;
  const bound = st.store.max_bytes ? `of ${mb(st.store.max_bytes)} (${st.store.policy})` : "(no bound set)";
  $("model").textContent = `Model: ${st.model}. Store: ${mb(st.store.used_bytes)} used ${bound}.`;
  const s = await stats.json();
  const o = s.overall;
  const questions = `${o.questions} question${o.questions === 1 ? "" : "s"}`;
  $("overall").textContent = `${questions} (${o.answered} answered, ${o.errors} errors); time to first token p50 ${ms(o.ttft_p50_ms)}, p95 ${ms(o.ttft_p95_ms)}; cache hit ratio ${ratio(o.cache_hit_ratio)}.`;
  figuresRows($("by-variant"), s.by_variant);
  figuresRows($("by-replica"), s.by_replica);
  figuresRows($("by-classroom"), s.by_classroom, (id) => classroomCells(s, id));
  charts(s);
}

async function change(method, url, payload) {
  const before = shownVersion;
  const response = await call(method, url, payload);
  if (!response.ok) return ($("backend-error").textContent = await errorMessage(response));
  const backends = await response.json();
  showBackends(backends);
  $("backend-error").textContent = "";
  if (backends.config.version === before) $("backend-status").textContent += " Nothing changed: that is how it already was.";
}

function showLogin(message) {
  $("console").hidden = true;
  $("token-form").hidden = false;
  $("forget").hidden = true;
  $("token-error").textContent = message || "";
  $("token").focus();
}

function showConsole() {
  $("token-form").hidden = true;
  $("console").hidden = false;
  $("forget").hidden = false;
  refresh();
}

// A token is kept only once the service has accepted it.
$("token-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = $("token").value;
  const response = await call("GET", "/api/operator/status", undefined, token);
  if (response.status === 403) return showLogin(WRONG_TOKEN);
  if (!response.ok) return showLogin(await errorMessage(response));
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  showConsole();
});
$("forget").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); showLogin(); });
$("switch-form").addEventListener("submit", (e) => { e.preventDefault(); change("PUT", "/api/operator/backends/active", { variant: $("active").value }); });
$("canary-form").addEventListener("submit", (e) => {
  e.preventDefault();
  change("PUT", "/api/operator/backends/canary", { variant: $("canary-variant").value, percent: Number($("canary-percent").value) });
});
$("end-canary").addEventListener("click", () => change("DELETE", "/api/operator/backends/canary"));
$("variant-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const replicas = $("variant-replicas").value.split("\n").map((s) => s.trim()).filter(Boolean);
  change("PUT", `/api/operator/backends/variants/${encodeURIComponent($("variant-name").value.trim())}`, { replicas });
});

if (sessionStorage.getItem(TOKEN_KEY)) showConsole();
setInterval(() => { if (!$("console").hidden) refresh(); }, 5000);
