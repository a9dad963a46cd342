"use strict";

// The pupil's page. An answer is written to its end by the service whatever this page does: the page only
// follows it, and when its connection drops (a reload, a phone switching tabs, Wi-Fi gone for a moment) it
// follows it again from where it was, by the id of the last token it got (the answer's length so far).

let classroomId = null;
// The question shown above its answer: its id, the `id` of the last token received, whether it has ended.
const current = { id: null, lastId: 0, ended: true };
let askAgainAt = 0; // Date.now() until which the service asked us to wait (429 Retry-After)
// The passage this page shows (a question names it, so it is answered about what the pupil reads), and
// whether the class takes questions; both follow the teacher's changes (`watchClass`).
let reading = null;
let classOpen = true;

const question = $("question");
const maxChars = Number(question.dataset.maxChars);
const letters = (text) => [...text].length; // as the service counts them (code points)

function showPassage(passage) {
  const text = $("passage-text");
  reading = passage ? passage.id : null;
  if (!passage) {
    $("passage-title").textContent = "No passage yet";
    text.replaceChildren(el("p", { text: "Your teacher has not chosen a passage yet. It will appear here as soon as they do." }));
    return;
  }
  $("passage-title").textContent = passage.title;
  text.replaceChildren(...passage.text.split(/\n\s*\n/).map((para) => el("p", { text: para })));
}

function historyItem(q) {
  const answer = q.answer || (q.status === "failed" ? q.error : "");
  const notes = { incomplete: " · the answer was cut short", answering: " · still answering…" };
  const item = el("li", {},
    el("p", { className: "q", text: q.question }),
    el("p", { className: "a", text: answer }),
    el("p", { className: "meta" + (q.status === "answering" ? " still" : ""), text: when(q.asked_at) + (notes[q.status] || "") }));
  if (q.status === "answering") {
    const stop = el("button", { text: "Stop", className: "secondary", attrs: { type: "button" } });
    stop.addEventListener("click", async () => {
      stop.disabled = true;
      await api("POST", `/api/pupil/questions/${q.id}/stop`);
      loadHistory();
    });
    item.append(stop);
  }
  return item;
}

// The pupil's questions, newest first.
async function fetchQuestions() {
  const response = await api("GET", "/api/pupil/questions");
  if (!response.ok) return null;
  return (await response.json()).questions;
}

// The history: every question but the one shown above its answer.
function showHistory(questions) {
  const earlier = questions.filter((q) => q.id !== current.id);
  $("history").replaceChildren(...earlier.map(historyItem));
  $("history-empty").hidden = earlier.length > 0;
  $("history-empty").textContent = current.id ? "No earlier questions yet." : "You have not asked anything yet.";
}

async function loadHistory() {
  const questions = await fetchQuestions();
  if (questions) showHistory(questions);
}

function setState(state) {
  const box = $("answer-box");
  box.dataset.state = state;
  const words = {
    thinking: "Thinking…",
    answering: "Still answering…",
    reconnecting: "The connection was lost. Reconnecting to your answer…",
    stopping: "Stopping…",
    ended: "",
  };
  $("answer-status").textContent = words[state];
  $("stop-button").hidden = state === "ended";
  $("answer").setAttribute("aria-busy", state === "ended" ? "false" : "true");
  updateAskButton();
}

// Show a question above its (empty, or so far) answer.
function showCurrent(id, text, answerSoFar) {
  current.id = id;
  current.lastId = letters(answerSoFar);
  current.ended = false;
  $("current-question").textContent = text;
  $("answer").textContent = answerSoFar;
  $("in-line").hidden = true;
  $("answer-box").hidden = false;
  $("stop-button").disabled = false;
}

// Read one connection's events; true once the answer's final event came, false if the stream just ended.
// `progress.events` counts what came, so that a connection that brought something starts the pauses anew.
async function readEvents(response, progress) {
  const inLine = $("in-line");
  for await (const { event, data, id } of sseEvents(response)) {
    progress.events += 1;
    if (event === "question") {
      current.id = data.question_id;
      loadHistory();
      continue;
    }
    if (event === "queued") {
      inLine.hidden = false;
      inLine.textContent = data.place === 1
        ? "Many pupils are asking right now. Your question is next in line."
        : `Many pupils are asking right now. Your question is number ${data.place} in line.`;
      continue;
    }
    inLine.hidden = true;
    if (event === "token") {
      $("answer").textContent += data.text;
      if (id !== null) current.lastId = Number(id);
      const state = $("answer-box").dataset.state;
      if (state === "thinking" || state === "reconnecting") setState("answering");
    } else if (event === "error") {
      $("ask-error").textContent = data.message;
      return true;
    } else if (event === "done") {
      return true;
    }
  }
  return false;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Before following again: a little longer each time, and not before the device is back online.
async function pause(attempt) {
  if (!navigator.onLine) await new Promise((resolve) => window.addEventListener("online", resolve, { once: true }));
  await sleep(Math.min(8000, 500 * 2 ** attempt));
}

// The current answer from where this page has it, through the answer's own address; null if unreachable.
function followAgain() {
  return fetch(`/api/pupil/questions/${current.id}/events`, {
    headers: { Accept: "text/event-stream", "Last-Event-ID": String(current.lastId) },
    credentials: "same-origin",
  }).catch(() => null);
}

// Follow the current answer to its end: from `response` (the question's own stream, or the first
// `followAgain`), and again and again whenever the connection drops.
async function followAnswer(response) {
  for (let attempt = 0; ; attempt++) {
    if (response && response.ok) {
      const progress = { events: 0 };
      try {
        if (await readEvents(response, progress)) break;
      } catch { /* the connection dropped mid-way */ }
      if (progress.events) attempt = 0;
    } else if (response && response.status < 500) { // not this pupil's any more (the session ended)
      $("ask-error").textContent = await errorMessage(response);
      break;
    }
    setState("reconnecting");
    await pause(attempt);
    response = await followAgain();
  }
  current.ended = true;
  setState("ended");
  loadHistory();
}

function updateAskButton() {
  const button = $("ask-button");
  const wait = Math.ceil((askAgainAt - Date.now()) / 1000);
  button.disabled = !current.ended || wait > 0 || !classOpen;
  button.textContent = wait > 0 ? `Ask (wait ${wait} s)` : "Ask";
}

// The service said to wait: tick the seconds on the button, and keep it from asking until then.
function waitToAsk(seconds) {
  askAgainAt = Date.now() + seconds * 1000;
  updateAskButton();
  const timer = setInterval(() => {
    updateAskButton();
    if (Date.now() >= askAgainAt) clearInterval(timer);
  }, 250);
}

function tooLong(text) {
  const n = letters(text);
  return n > maxChars ? `Your question is too long (${n} letters; the most is ${maxChars}). Please ask it in fewer words.` : "";
}

function updateCount() {
  const n = letters(question.value);
  const count = $("question-count");
  count.textContent = `${n} of ${maxChars} letters`;
  count.classList.toggle("over", n > maxChars);
  const sentence = tooLong(question.value);
  question.setAttribute("aria-invalid", sentence ? "true" : "false");
  if (sentence) $("ask-error").textContent = sentence;
  else if ($("ask-error").dataset.tooLong) $("ask-error").textContent = "";
  $("ask-error").dataset.tooLong = sentence ? "yes" : "";
}

// What the teacher changes while the page is open: the passage to read (shown at once, with a sentence
// saying so) and whether the class takes questions. The browser reconnects by itself; each connection
// starts with the class as it is, so a change made meanwhile is not missed.
function watchClass() {
  const source = new EventSource("/api/pupil/events");
  source.addEventListener("class", (event) => {
    const { is_open: isOpen, passage } = JSON.parse(event.data);
    const newId = passage ? passage.id : null;
    if (newId !== reading) {
      const before = reading;
      showPassage(passage);
      if (before !== null || passage) {
        $("passage-notice").textContent = passage
          ? `Your teacher has changed the passage. You are now reading “${passage.title}”.`
          : "Your teacher has taken the passage away for now.";
        $("passage-notice").hidden = false;
      }
    }
    classOpen = isOpen;
    $("class-closed").hidden = isOpen;
    updateAskButton();
  });
}

async function load() {
  const response = await api("GET", "/api/pupil/me");
  if (response.status === 401) return window.location.assign("/");
  if (!response.ok) return ($("ask-error").textContent = await errorMessage(response));
  const me = await response.json();
  classroomId = me.classroom_id;
  showPassage(me.passage);
  classOpen = me.is_open;
  $("class-closed").hidden = me.is_open;
  watchClass();
  // An answer still being written (the page was reloaded, or came back): show it and follow it again.
  // The history is shown once the question above its answer is known, so that it is not listed twice.
  const questions = (await fetchQuestions()) || [];
  const writing = questions.find((q) => q.status === "answering");
  if (writing) showCurrent(writing.id, writing.question, writing.answer);
  showHistory(questions);
  if (writing) {
    setState(writing.answer ? "answering" : "thinking");
    followAnswer(await followAgain());
  }
}

$("ask-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = question.value.trim();
  $("ask-error").textContent = "";
  if (!text) return ($("ask-error").textContent = "Please type a question before you send it.");
  if (tooLong(text)) return updateCount();
  if ($("ask-button").disabled) return; // an answer is still being written, or the service asked to wait
  const button = $("ask-button");
  button.disabled = true;
  question.focus({ preventScroll: true });
  const response = await fetch(`/api/classrooms/${classroomId}/questions`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify({ question: text, passage_id: reading }),
  }).catch(() => null);
  if (!response) {
    updateAskButton();
    return ($("ask-error").textContent = "The server cannot be reached. Check the connection and try again.");
  }
  if (!response.ok) {
    const gone = response.status === 409 && (await response.clone().json().catch(() => ({}))).error?.code === "passage_gone";
    $("ask-error").textContent = await errorMessage(response);
    if (gone) { // the question stays in its box; the passage to read now is shown
      const me = await api("GET", "/api/pupil/me");
      if (me.ok) showPassage((await me.json()).passage);
    }
    const retryAfter = Number(response.headers.get("Retry-After"));
    if (response.status === 429 && retryAfter > 0) waitToAsk(retryAfter);
    else updateAskButton();
    return;
  }
  // Taken: the question moves above its answer, the box is free for the next one.
  showCurrent(null, text, "");
  question.value = "";
  updateCount();
  setState("thinking");
  $("answer-box").scrollIntoView({ block: "start" });
  await followAnswer(response);
});

question.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("ask-form").requestSubmit();
  }
});
question.addEventListener("input", updateCount);

$("stop-button").addEventListener("click", async () => {
  if (!current.id) return;
  $("stop-button").disabled = true;
  setState("stopping");
  const response = await api("POST", `/api/pupil/questions/${current.id}/stop`);
  if (!response.ok && response.status !== 409) $("ask-error").textContent = await errorMessage(response);
});

$("leave").addEventListener("click", async () => {
  await api("DELETE", "/api/pupil/session");
  window.location.assign("/");
});

updateCount();
load();
