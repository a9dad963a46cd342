// The try-it page: every text a user typed is shown with textContent, never parsed as HTML.
"use strict";

let classroomId = null;

const $ = (id) => document.getElementById(id);

function say(element, text, isError = false) {
  element.textContent = text;
  element.classList.toggle("error", isError);
}

async function errorMessage(response) {
  try {
    const body = await response.json();
    return body.error ? body.error.message : response.statusText;
  } catch {
    return `The server answered ${response.status}.`;
  }
}

async function postJson(url, payload) {
  return fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(payload),
  });
}

// Server-Sent Events over a POST: EventSource only does GET, so read the stream and split events.
async function* sseEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

async function refreshHistory() {
  if (!classroomId) return;
  const response = await fetch(`/api/classrooms/${classroomId}/questions`);
  if (!response.ok) return;
  const { questions } = await response.json();
  const list = $("history");
  list.replaceChildren(
    ...questions.map((q) => {
      const item = document.createElement("li");
      const cached = q.usage ? ` (${q.usage.cached_tokens} of ${q.usage.prompt_tokens} prompt tokens from the cache)` : "";
      item.textContent = `${q.pupil} asked “${q.question}” [${q.status}]${cached}: ${q.answer || q.error || ""}`;
      return item;
    }),
  );
}

$("class-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const response = await postJson("/api/classrooms", { name: $("class-name").value });
  if (!response.ok) return say($("class-status"), await errorMessage(response), true);
  const classroom = await response.json();
  classroomId = classroom.id;
  say($("class-status"), `Class created. Join code: ${classroom.join_code}`);
  refreshHistory();
});

$("passage-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  if (!classroomId) return say($("passage-status"), "Create a class first.", true);
  const response = await postJson(`/api/classrooms/${classroomId}/passages`, {
    title: $("passage-title").value,
    text: $("passage-text").value,
  });
  if (!response.ok) return say($("passage-status"), await errorMessage(response), true);
  const passage = await response.json();
  say($("passage-status"), `Passage saved: ${passage.tokens} tokens (at most ${passage.max_tokens}).`);
});

$("ask-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  if (!classroomId) return say($("answer-status"), "Create a class and add a passage first.", true);
  const answer = $("answer");
  answer.textContent = "";
  say($("answer-status"), "Thinking…");
  const response = await fetch(`/api/classrooms/${classroomId}/questions`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify({ pupil: $("pupil").value, question: $("question").value }),
  });
  if (!response.ok) return say($("answer-status"), await errorMessage(response), true);
  for await (const { event, data } of sseEvents(response)) {
    if (event === "token") answer.textContent += data.text;
    else if (event === "done") {
      const u = data.usage;
      say($("answer-status"),
        `First words after ${Math.round(data.ttft_ms)} ms. ${u.cached_tokens} of ${u.prompt_tokens} prompt tokens came from the cache.`);
    } else if (event === "error") say($("answer-status"), data.message, true);
  }
  refreshHistory();
});
