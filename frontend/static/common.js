// Shared by every page. Anything a user typed is shown through textContent, never parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);

// Build an element with text (never HTML) and children.
function el(tag, { text, className, attrs } = {}, ...children) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  node.append(...children);
  return node;
}

// The sentence the server put in its error envelope, or a plain fallback.
async function errorMessage(response) {
  try {
    const body = await response.json();
    if (body.error && body.error.message) return body.error.message;
  } catch { /* not JSON */ }
  return `Something went wrong (the server said ${response.status}). Please try again.`;
}

async function api(method, url, payload, headers = {}) {
  const options = { method, headers: { Accept: "application/json", ...headers }, credentials: "same-origin" };
  if (payload instanceof FormData) options.body = payload;
  else if (payload !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(payload);
  }
  try {
    return await fetch(url, options);
  } catch {
    return new Response(JSON.stringify({ error: { message: "The server cannot be reached. Check the connection and try again." } }), { status: 599 });
  }
}

// Milliseconds for people; "–" where there is no figure yet.
const ms = (v) => (v === null || v === undefined ? "–" : `${Math.round(v)} ms`);

// Server-Sent Events from a POST: EventSource only does GET, so read the body and split the frames. Each
// comes with its `id` (null without one).
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
      let id = null;
      const data = [];
      for (const line of frame.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("id:")) id = line.slice(3).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")), id };
    }
  }
}

function when(iso) {
  return new Date(iso).toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
}
