"use strict";

let classroomId = null;

function showPassage(passage) {
  const text = $("passage-text");
  if (!passage) {
    $("passage-title").textContent = "No passage yet";
    text.replaceChildren(el("p", { text: "Your teacher has not chosen a passage yet. Wait a moment and reload the page." }));
    return;
  }
  $("passage-title").textContent = passage.title;
  text.replaceChildren(...passage.text.split(/\n\s*\n/).map((para) => el("p", { text: para })));
}

function historyItem(q) {
  const answer = q.answer || (q.status === "failed" ? q.error : "");
  return el("li", {},
    el("p", { className: "q", text: q.question }),
    el("p", { className: "a", text: answer }),
    el("p", { className: "meta", text: when(q.asked_at) + (q.status === "incomplete" ? " · the answer was cut short" : "") }));
}

async function loadHistory() {
  const response = await api("GET", "/api/pupil/questions");
  if (!response.ok) return;
  const { questions } = await response.json();
  $("history").replaceChildren(...questions.map(historyItem));
  $("history-empty").hidden = questions.length > 0;
}

async function load() {
  const response = await api("GET", "/api/pupil/me");
  if (response.status === 401) return window.location.assign("/");
  if (!response.ok) return ($("ask-error").textContent = await errorMessage(response));
  const me = await response.json();
  classroomId = me.classroom_id;
  showPassage(me.passage);
  await loadHistory();
}

$("ask-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const question = $("question").value.trim();
  $("ask-error").textContent = "";
  if (!question) return ($("ask-error").textContent = "Please type a question before you send it.");
  const button = $("ask-button");
  const answer = $("answer");
  button.disabled = true;
  answer.textContent = "";
  answer.setAttribute("aria-busy", "true");
  $("answer-box").hidden = false;
  try {
    const response = await fetch(`/api/classrooms/${classroomId}/questions`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify({ question }),
    }).catch(() => null);
    if (!response) return ($("ask-error").textContent = "The server cannot be reached. Check the connection and try again.");
    if (!response.ok) {
      $("answer-box").hidden = true;
      return ($("ask-error").textContent = await errorMessage(response));
    }
    const inLine = $("in-line");
    for await (const { event, data } of sseEvents(response)) {
      if (event === "queued") {
        inLine.hidden = false;
        inLine.textContent = data.place === 1
          ? "Many pupils are asking right now. Your question is next in line."
          : `Many pupils are asking right now. Your question is number ${data.place} in line.`;
        continue;
      }
      inLine.hidden = true;
      if (event === "token") answer.textContent += data.text;
      else if (event === "error") $("ask-error").textContent = data.message;
      else if (event === "done") $("question").value = "";
    }
  } finally {
    button.disabled = false;
    answer.setAttribute("aria-busy", "false");
    loadHistory();
  }
});

$("leave").addEventListener("click", async () => {
  await api("DELETE", "/api/pupil/session");
  window.location.assign("/");
});

load();
