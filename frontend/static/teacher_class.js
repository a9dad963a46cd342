"use strict";

const classroomId = $("classroom").dataset.classroomId;
const base = `/api/classrooms/${classroomId}`;
const PAGE = 50; // questions a page of the feed shows; "Older questions" fetches the next
let detail = null;
let passageTitles = {};
let pupilLabels = []; // the class's pupils as teachers see them: "Ada", "Ada (2)"
let editing = null; // the passage the edit form is for

// A passage's size in words a teacher counts, and the room left in the budget, in this passage's own
// words per token (a passage's tokens are counted with the model's tokenizer; words are what teachers know).
const wordCount = (text) => text.split(/\s+/).filter(Boolean).length;
const number = (n) => n.toLocaleString("en");
function roomLeft(p, maxTokens) {
  const left = Math.max(0, maxTokens - p.tokens);
  return Math.round((left * wordCount(p.text)) / Math.max(1, p.tokens));
}

function problem(message) {
  $("passage-status").textContent = "";
  $("passage-error").textContent = message;
}

function said(message) {
  $("passage-error").textContent = "";
  $("passage-status").textContent = message;
}

function passageItem(p, d) {
  const active = p.id === d.active_passage_id;
  const words = `about ${number(wordCount(p.text))} words`;
  const version = p.version > 1 ? ` · version ${p.version}` : "";
  const item = el("li", { attrs: { "data-passage-id": p.id } },
    el("span", { className: "passage-name", text: p.title }),
    el("span", { className: "meta", text: ` ${words}${version} ` }));
  const button = (text, label, action) => {
    const b = el("button", { text, className: "small-button", attrs: { type: "button", "aria-label": `${text} “${label}”` } });
    b.addEventListener("click", action);
    return b;
  };
  if (active) item.append(el("span", { className: "active-badge", text: "pupils see this one" }));
  const actions = el("span", { className: "actions" });
  if (!active) actions.append(button("Publish", p.title, () => choose(p.id)));
  actions.append(button("Read", p.title, () => preview(p)), button("Edit", p.title, () => startEdit(p)));
  if (!active) actions.append(button("Delete", p.title, () => confirmDelete(p, item)));
  item.append(actions);
  return item;
}

function showDetail(d) {
  detail = d;
  passageTitles = Object.fromEntries([
    ...d.former_passages.map((p) => [p.id, p.version > 1 ? `${p.title} (version ${p.version})` : p.title]),
    ...d.passages.map((p) => [p.id, p.title]),
  ]);
  const archived = d.archived_at !== null;
  $("open-state").textContent = archived
    ? "This class is archived: no one can join or ask. Restore it to use it again."
    : d.is_open ? "The class is open: pupils can join and ask." : "The class is closed: no one can join or ask.";
  $("toggle-open").textContent = d.is_open ? "Close the class" : "Open the class";
  $("toggle-open").hidden = archived;
  $("toggle-archive").textContent = archived ? "Restore this class" : "Archive this class";
  const active = d.passages.find((p) => p.id === d.active_passage_id);
  $("published-state").textContent = active
    ? `Pupils see “${active.title}”.`
    : d.passages.length ? "Pupils see no passage yet: publish one." : "Pupils see no passage yet: add one, then publish it.";
  $("published-state").classList.toggle("warning", !active);
  $("passages").replaceChildren(...d.passages.map((p) => passageItem(p, d)));
  const select = $("filter-passage");
  const chosen = select.value;
  const options = (list) => list.map((p) => el("option", { text: passageTitles[p.id], attrs: { value: p.id } }));
  select.replaceChildren(el("option", { text: "any", attrs: { value: "" } }), ...options(d.passages));
  if (d.former_passages.length) select.append(el("optgroup", { attrs: { label: "Earlier versions and deleted" } }, ...options(d.former_passages)));
  select.value = chosen;
}

async function loadDetail() {
  const response = await api("GET", base);
  if (response.status === 401) return window.location.assign("/teacher/login");
  if (response.status === 404) return window.location.reload(); // deleted meanwhile: the page says so
  if (!response.ok) return problem(await errorMessage(response));
  showDetail(await response.json());
}

async function choose(passageId) {
  const response = await api("PUT", `${base}/active-passage`, { passage_id: passageId });
  if (!response.ok) return problem(await errorMessage(response));
  showDetail(await response.json());
  said(`Published: pupils now see “${passageTitles[passageId]}”.`);
}

function preview(p) {
  $("preview-title").textContent = p.version > 1 ? `${p.title} (version ${p.version})` : p.title;
  $("preview-text").replaceChildren(...p.text.split(/\n\s*\n/).map((para) => el("p", { text: para })));
  $("preview").hidden = false;
  $("preview-close").focus();
}

$("preview-close").addEventListener("click", () => {
  $("preview").hidden = true;
});

function startEdit(p) {
  editing = p;
  $("edit-heading").textContent = `Edit “${p.title}”`;
  $("edit-title").value = p.title;
  $("edit-text").value = p.text;
  $("edit-form").hidden = false;
  $("edit-title").focus();
}

function stopEdit() {
  editing = null;
  $("edit-form").hidden = true;
}

$("edit-cancel").addEventListener("click", stopEdit);

$("edit-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const response = await api("PUT", `${base}/passages/${editing.id}`, { title: $("edit-title").value, text: $("edit-text").value });
  if (!response.ok) return problem(await errorMessage(response));
  const saved = await response.json();
  stopEdit();
  await loadDetail();
  said(`Saved “${saved.title}” as version ${saved.version}.${saved.published ? " Pupils see this version now." : ""}`);
});

// Deleting asks first, in place: the item offers "Delete for good" and "Keep it".
function confirmDelete(p, item) {
  const sure = el("span", { className: "confirm", attrs: { role: "group", "aria-label": `Delete “${p.title}”?` } },
    el("span", { text: `Delete “${p.title}”? Questions already asked keep it. ` }));
  const yes = el("button", { text: "Delete for good", className: "small-button danger", attrs: { type: "button" } });
  const no = el("button", { text: "Keep it", className: "small-button", attrs: { type: "button" } });
  yes.addEventListener("click", async () => {
    const response = await api("DELETE", `${base}/passages/${p.id}`);
    if (!response.ok) return problem(await errorMessage(response));
    await loadDetail();
    said(`“${p.title}” deleted.`);
  });
  no.addEventListener("click", () => showDetail(detail));
  sure.append(yes, no);
  item.append(sure);
  no.focus();
}

// Plain words for teachers: seconds, and how much of the prompt was reused rather than read again.
function seconds(v) {
  if (v === null || v === undefined) return "–";
  const s = v / 1000;
  const shown = s < 10 ? s.toFixed(1) : String(Math.round(s));
  return `${shown} second${shown === "1.0" ? "" : "s"}`;
}

const STATUS_WORDS = {
  answering: "being answered",
  answered: "answered",
  incomplete: "answer cut short",
  failed: "not answered",
  refused: "not taken: too many questions at once",
};

function reused(usage) {
  if (!usage || !usage.prompt_tokens) return "";
  return ` · words reused from the passage: ${Math.round((100 * usage.cached_tokens) / usage.prompt_tokens)} %`;
}

function questionItem(q) {
  const timing = q.total_ms ? ` · answered in ${seconds(q.total_ms)} (first words after ${seconds(q.ttft_ms)})` : "";
  const answer = el("p", { className: "a clamped", text: q.answer || q.error || (q.status === "answering" ? "…answering" : "") });
  answer.id = `answer-${q.id}`;
  const item = el("li", { attrs: { "data-question-id": q.id } },
    el("p", { className: "q", text: `${q.pupil_label}: ${q.question}` }),
    answer,
    el("p", { className: "meta", text: `${when(q.asked_at)} · ${passageTitles[q.passage_id] || "a passage no longer kept"} · ${STATUS_WORDS[q.status] || q.status}${timing}${reused(q.usage)}` }));
  return item;
}

// A long answer shows its first lines; "Show all" opens it (only where there is more to show).
function addMore(item) {
  const answer = item.querySelector(".a");
  if (!answer || item.querySelector(".more") || answer.scrollHeight <= answer.clientHeight + 2) return;
  const more = el("button", { text: "Show all", className: "link more", attrs: { type: "button", "aria-expanded": "false", "aria-controls": answer.id } });
  more.addEventListener("click", () => {
    const open = answer.classList.toggle("clamped") === false;
    more.textContent = open ? "Show less" : "Show all";
    more.setAttribute("aria-expanded", String(open));
  });
  answer.after(more);
}

function shown(items) {
  requestAnimationFrame(() => items.forEach(addMore));
}

let statsTimer = null;

async function loadStats() {
  const response = await api("GET", `${base}/stats`);
  if (!response.ok) return;
  const f = await response.json();
  if (!f.questions) return ($("stats").textContent = "No questions in the last hour.");
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  let memory = "";
  if (f.cache_hit_ratio !== null) {
    const share = Math.round(100 * f.cache_hit_ratio);
    memory = share >= 50
      ? ` Most of the passage was reused from memory (words reused from the passage: ${share} %).`
      : ` Words reused from the passage: ${share} %.`;
  }
  $("stats").textContent = `${plural(f.questions, "question")}, ${f.answered} answered. Answers usually began after ${seconds(f.ttft_p50_ms)}, ` +
    `and within ${seconds(f.ttft_p95_ms)} for 95 in 100.${memory}`;
}

function filters() {
  return { pupil: $("filter-pupil").value.trim(), passage_id: $("filter-passage").value };
}

// The same rule as the server's: a name as listed picks that pupil; else any name holding what was typed.
function matches(q) {
  const f = filters();
  const typed = f.pupil.toLowerCase();
  const label = q.pupil_label.toLowerCase();
  const exact = pupilLabels.some((l) => l.toLowerCase() === typed);
  const pupilOk = !typed || (exact ? label === typed : label.includes(typed));
  return pupilOk && (!f.passage_id || q.passage_id === f.passage_id);
}

async function loadPupils() {
  const response = await api("GET", `${base}/pupils`);
  if (!response.ok) return;
  pupilLabels = (await response.json()).pupils.map((p) => p.label);
  $("pupil-names").replaceChildren(...pupilLabels.map((label) => el("option", { attrs: { value: label } })));
}

// The questions shown, newest first: a first page, then older pages on demand.
async function fetchPage(offset) {
  const params = new URLSearchParams(Object.entries(filters()).filter(([, v]) => v));
  params.set("limit", String(PAGE + 1)); // one more than shown: whether there are older ones
  params.set("offset", String(offset));
  const response = await api("GET", `${base}/questions?${params}`);
  if (!response.ok) return null;
  const { questions } = await response.json();
  $("older").hidden = questions.length <= PAGE;
  return questions.slice(0, PAGE);
}

async function loadQuestions() {
  const questions = await fetchPage(0);
  if (questions === null) return;
  const items = questions.map(questionItem);
  $("questions").replaceChildren(...items);
  $("no-questions").hidden = questions.length > 0;
  $("no-questions").textContent = filters().pupil || filters().passage_id ? "No questions match." : "No questions yet.";
  $("older-state").textContent = "";
  shown(items);
}

$("older").addEventListener("click", async () => {
  const list = $("questions");
  const questions = await fetchPage(list.children.length);
  if (questions === null) return;
  const fresh = questions.filter((q) => !list.querySelector(`[data-question-id="${q.id}"]`)).map(questionItem);
  list.append(...fresh);
  shown(fresh);
  $("older-state").textContent = $("older").hidden
    ? "There are no older questions."
    : `${list.children.length} questions shown.`;
});

// Live: each question arrives when asked and again when answered; replace it in place.
function listen() {
  const source = new EventSource(`${base}/events`);
  let lost = false; // what was asked while the page was cut off came to no one: read the list again
  source.addEventListener("open", () => {
    $("live-state").textContent = "New questions appear here as pupils ask them.";
    if (lost) loadQuestions();
    lost = false;
  });
  source.addEventListener("error", () => {
    lost = true;
    $("live-state").textContent = "Reconnecting to the live updates…";
  });
  source.addEventListener("question", (event) => {
    const q = JSON.parse(event.data);
    if (q.status !== "answering") {
      clearTimeout(statsTimer);
      statsTimer = setTimeout(loadStats, 500);
    }
    if (!pupilLabels.includes(q.pupil_label)) loadPupils();
    if (!matches(q)) return;
    const item = questionItem(q);
    const old = $("questions").querySelector(`[data-question-id="${q.id}"]`);
    if (old) old.replaceWith(item);
    else $("questions").prepend(item);
    $("no-questions").hidden = true;
    shown([item]);
  });
}

$("toggle-open").addEventListener("click", async () => {
  const response = await api("PATCH", base, { is_open: !detail.is_open });
  if (!response.ok) return problem(await errorMessage(response));
  await loadDetail();
});

$("toggle-archive").addEventListener("click", async () => {
  const archive = detail.archived_at === null;
  const response = await api("PATCH", base, { archived: archive });
  if (!response.ok) return ($("class-error").textContent = await errorMessage(response));
  $("class-error").textContent = "";
  await loadDetail();
});

$("confirm-name").addEventListener("input", () => {
  $("delete-button").disabled = $("confirm-name").value.trim() !== detail.name.trim();
});

$("delete-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  if ($("confirm-name").value.trim() !== detail.name.trim()) return;
  const response = await api("DELETE", base);
  if (!response.ok) return ($("class-error").textContent = await errorMessage(response));
  window.location.assign("/teacher?deleted=1");
});

async function added(response, form) {
  if (!response.ok) return problem(await errorMessage(response));
  const passage = await response.json();
  form.reset();
  await loadDetail();
  const stored = detail.passages.find((p) => p.id === passage.id);
  const room = stored ? ` This passage could be about ${number(roomLeft(stored, passage.max_tokens))} words longer.` : "";
  const active = detail.passages.find((p) => p.id === detail.active_passage_id);
  const seen = passage.published
    ? " Pupils see it now."
    : active ? ` It is not published: pupils still see “${active.title}”.` : " It is not published yet: publish it when the class is ready.";
  said(`“${passage.title}” added.${seen}${room}`);
}

$("paste-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = { title: $("passage-title").value, text: $("passage-text").value, publish: $("paste-publish").checked };
  await added(await api("POST", `${base}/passages`, body), event.target);
});

$("upload-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  await added(await api("POST", `${base}/passages/upload`, new FormData(event.target)), event.target);
});

$("filter-form").addEventListener("submit", (event) => {
  event.preventDefault();
  loadQuestions();
});
$("filter-pupil").addEventListener("focus", loadPupils);

$("join-url").textContent = `${window.location.origin}/`;
loadDetail().then(async () => {
  listen();
  loadStats();
  await loadPupils();
  return loadQuestions();
});
