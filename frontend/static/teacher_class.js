"use strict";

const classroomId = $("classroom").dataset.classroomId;
const base = `/api/classrooms/${classroomId}`;
let detail = null;
let passageTitles = {};

function showDetail(d) {
  detail = d;
  passageTitles = Object.fromEntries(d.passages.map((p) => [p.id, p.title]));
  $("open-state").textContent = d.is_open ? "The class is open: pupils can join and ask." : "The class is closed: no one can join or ask.";
  $("toggle-open").textContent = d.is_open ? "Close the class" : "Open the class";
  $("passages").replaceChildren(
    ...d.passages.map((p) => {
      const item = el("li", {}, el("span", { text: `${p.title} (${p.tokens} tokens) ` }));
      if (p.id === d.active_passage_id) item.append(el("span", { className: "active-badge", text: "pupils see this one" }));
      else {
        const button = el("button", { text: "Show this one to pupils", attrs: { type: "button" } });
        button.addEventListener("click", () => choose(p.id));
        item.append(button);
      }
      return item;
    }));
  const select = $("filter-passage");
  const chosen = select.value;
  select.replaceChildren(el("option", { text: "any", attrs: { value: "" } }),
    ...d.passages.map((p) => el("option", { text: p.title, attrs: { value: p.id } })));
  select.value = chosen;
}

async function loadDetail() {
  const response = await api("GET", base);
  if (response.status === 401) return window.location.assign("/teacher/login");
  if (!response.ok) return ($("passage-error").textContent = await errorMessage(response));
  showDetail(await response.json());
}

async function choose(passageId) {
  const response = await api("PUT", `${base}/active-passage`, { passage_id: passageId });
  if (!response.ok) return ($("passage-error").textContent = await errorMessage(response));
  showDetail(await response.json());
}

function questionItem(q) {
  const usage = q.usage ? ` · ${q.usage.cached_tokens} of ${q.usage.prompt_tokens} prompt tokens cached` : "";
  const timing = q.ttft_ms ? ` · first words after ${Math.round(q.ttft_ms)} ms` : "";
  return el("li", { attrs: { "data-question-id": q.id } },
    el("p", { className: "q", text: `${q.pupil}: ${q.question}` }),
    el("p", { className: "a", text: q.answer || q.error || (q.status === "answering" ? "…answering" : "") }),
    el("p", { className: "meta", text: `${when(q.asked_at)} · ${passageTitles[q.passage_id] || "passage"} · ${q.status}${usage}${timing}` }));
}

let statsTimer = null;

async function loadStats() {
  const response = await api("GET", `${base}/stats`);
  if (!response.ok) return;
  const f = await response.json();
  if (!f.questions) return ($("stats").textContent = "No questions in the last hour.");
  const cache = f.cache_hit_ratio === null ? "–" : `${Math.round(100 * f.cache_hit_ratio)} %`;
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  $("stats").textContent = `${plural(f.questions, "question")}, ${f.answered} answered. First words after ${ms(f.ttft_p50_ms)} ` +
    `(median) and at most ${ms(f.ttft_p95_ms)} for 95 in 100. ${cache} of the prompt tokens came from the cache.`;
}

function filters() {
  return { pupil: $("filter-pupil").value.trim(), passage_id: $("filter-passage").value };
}

function matches(q) {
  const f = filters();
  return (!f.pupil || q.pupil.toLowerCase() === f.pupil.toLowerCase()) && (!f.passage_id || q.passage_id === f.passage_id);
}

async function loadQuestions() {
  const params = new URLSearchParams(Object.entries(filters()).filter(([, v]) => v));
  const response = await api("GET", `${base}/questions?${params}`);
  if (!response.ok) return;
  const { questions } = await response.json();
  $("questions").replaceChildren(...questions.map(questionItem));
  $("no-questions").hidden = questions.length > 0;
}

// Live: each question arrives when asked and again when answered; replace it in place.
function listen() {
  const source = new EventSource(`${base}/events`);
  source.addEventListener("open", () => ($("live-state").textContent = "New questions appear here as pupils ask them."));
  source.addEventListener("error", () => ($("live-state").textContent = "Reconnecting to the live updates…"));
  source.addEventListener("question", (event) => {
    const q = JSON.parse(event.data);
    if (q.status !== "answering") {
      clearTimeout(statsTimer);
      statsTimer = setTimeout(loadStats, 500);
    }
    if (!matches(q)) return;
    const item = questionItem(q);
    const old = $("questions").querySelector(`[data-question-id="${q.id}"]`);
    if (old) old.replaceWith(item);
    else $("questions").prepend(item);
    $("no-questions").hidden = true;
  });
}

$("toggle-open").addEventListener("click", async () => {
  const response = await api("PATCH", base, { is_open: !detail.is_open });
  if (!response.ok) return ($("passage-error").textContent = await errorMessage(response));
  await loadDetail();
});

async function added(response) {
  $("passage-error").textContent = "";
  $("passage-status").textContent = "";
  if (!response.ok) return ($("passage-error").textContent = await errorMessage(response));
  const passage = await response.json();
  $("passage-status").textContent = `“${passage.title}” added (${passage.tokens} of at most ${passage.max_tokens} tokens). Pupils now see it.`;
  await loadDetail();
}

$("paste-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  await added(await api("POST", `${base}/passages`, { title: $("passage-title").value, text: $("passage-text").value }));
});

$("upload-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  await added(await api("POST", `${base}/passages/upload`, new FormData(event.target)));
});

$("filter-form").addEventListener("submit", (event) => {
  event.preventDefault();
  loadQuestions();
});

$("join-url").textContent = `${window.location.origin}/`;
loadDetail().then(() => {
  listen();
  loadStats();
  return loadQuestions();
});
