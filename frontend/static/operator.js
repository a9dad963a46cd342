// The operator's console: every call carries the operator token, kept for this tab only.
"use strict";

const TOKEN_KEY = "classroom-operator-token";
let plots = {};

// common.js's api(), with the operator token.
const call = (method, url, payload) =>
  api(method, url, payload, { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ""}` });

const ratio = (v) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(1)} %`);

function figuresRows(body, groups, label = (k) => k) {
  body.replaceChildren(
    ...Object.entries(groups).map(([key, f]) =>
      el("tr", {}, el("td", { text: label(key) }), el("td", { text: `${f.questions}` }),
        el("td", { text: ms(f.ttft_p50_ms) }), el("td", { text: ms(f.ttft_p95_ms) }), el("td", { text: ratio(f.cache_hit_ratio) }))));
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
  $("replicas").replaceChildren(
    ...b.replicas.map((r) => {
      const v = r.vllm;
      const hits = v.prefix_cache_queries ? ratio(v.prefix_cache_hits / v.prefix_cache_queries) : "–";
      return el("tr", {}, el("td", { text: r.variants.join(", ") }), el("td", { text: r.url }),
        el("td", { className: r.healthy ? "up" : "down", text: r.healthy ? "healthy" : `down: ${r.error}` }),
        el("td", { text: `${v.running}` }), el("td", { text: `${v.waiting}` }),
        el("td", { text: ratio(v.kv_cache_usage) }), el("td", { text: hits }));
    }));
}

function plot(id, title, series, value) {
  const variants = Object.keys(series);
  if (!variants.length) return;
  const times = series[variants[0]].map((p) => p.start);
  const data = [times, ...variants.map((v) => series[v].map((p) => value(p)))];
  const colours = ["#1d4f91", "#c2410c", "#2e7d32", "#6b21a8"];
  const opts = {
    title, width: Math.min(800, $("console").clientWidth - 40), height: 220,
    series: [{}, ...variants.map((v, i) => ({ label: v, stroke: colours[i % colours.length], spanGaps: false }))],
  };
  if (plots[id]) plots[id].destroy();
  plots[id] = new uPlot(opts, data, $(id));
}

async function refresh() {
  const [backends, stats, status] = await Promise.all([
    call("GET", "/api/operator/backends"), call("GET", "/api/operator/stats"), call("GET", "/api/operator/status")]);
  if (backends.status === 403) return showLogin(await errorMessage(backends));
  if (!backends.ok || !stats.ok || !status.ok) return ($("backend-error").textContent = await errorMessage(backends.ok ? stats : backends));
  $("backend-error").textContent = "";
  showBackends(await backends.json());
  $("model").textContent = `Model: ${(await status.json()).model}`;
  const s = await stats.json();
  const o = s.overall;
  $("overall").textContent = `${o.questions} questions (${o.answered} answered); time to first token p50 ${ms(o.ttft_p50_ms)}, p95 ${ms(o.ttft_p95_ms)}; cache hit ratio ${ratio(o.cache_hit_ratio)}.`;
  figuresRows($("by-variant"), s.by_variant);
  figuresRows($("by-replica"), s.by_replica);
  figuresRows($("by-classroom"), s.by_classroom, (id) => s.classroom_names[id] || id);
  plot("ttft-plot", "Time to first token, p95 per minute (ms)", s.series, (p) => p.ttft_p95_ms);
  plot("cache-plot", "Cache hit ratio per minute (%)", s.series, (p) => (p.cache_hit_ratio === null ? null : 100 * p.cache_hit_ratio));
}

async function change(method, url, payload) {
  const response = await call(method, url, payload);
  if (!response.ok) return ($("backend-error").textContent = await errorMessage(response));
  showBackends(await response.json());
  $("backend-error").textContent = "";
}

function showLogin(message) {
  $("console").hidden = true;
  $("token-form").hidden = false;
  $("forget").hidden = true;
  $("token-error").textContent = message || "";
}

function showConsole() {
  $("token-form").hidden = true;
  $("console").hidden = false;
  $("forget").hidden = false;
  refresh();
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value);
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
