"use strict";

const day = (iso) => new Date(iso).toLocaleDateString([], { dateStyle: "medium" });
const questions = (n) => (n === 1 ? "1 question" : `${n.toLocaleString("en")} questions`);

function classItem(c) {
  const state = c.archived_at ? ` · archived ${day(c.archived_at)}` : c.is_open ? "" : " · closed";
  const item = el("li", {},
    el("a", { text: c.name, attrs: { href: `/teacher/classes/${c.id}` } }),
    el("span", { className: "meta", text: ` · made ${day(c.created_at)} · ${questions(c.questions)} · code ${c.join_code}${state}` }));
  if (c.archived_at) {
    const restore = el("button", { text: "Restore", className: "small-button", attrs: { type: "button", "aria-label": `Restore “${c.name}”` } });
    restore.addEventListener("click", async () => {
      const response = await api("PATCH", `/api/classrooms/${c.id}`, { archived: false });
      if (!response.ok) return ($("classes-error").textContent = await errorMessage(response));
      $("classes-status").textContent = `“${c.name}” is back among your classes.`;
      await loadClasses();
    });
    item.append(" ", restore);
  }
  return item;
}

async function loadClasses() {
  const response = await api("GET", "/api/classrooms");
  if (response.status === 401) return window.location.assign("/teacher/login");
  if (!response.ok) return ($("classes-error").textContent = await errorMessage(response));
  const { classrooms } = await response.json();
  const inUse = classrooms.filter((c) => !c.archived_at);
  const archived = classrooms.filter((c) => c.archived_at);
  $("classes").replaceChildren(...inUse.map(classItem));
  $("archived").replaceChildren(...archived.map(classItem));
  $("no-classes").hidden = inUse.length > 0;
  $("archived-section").hidden = archived.length === 0;
}

$("create-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const response = await api("POST", "/api/classrooms", { name: $("class-name").value });
  if (!response.ok) return ($("create-error").textContent = await errorMessage(response));
  const classroom = await response.json();
  window.location.assign(`/teacher/classes/${classroom.id}`);
});

$("sign-out").addEventListener("click", async () => {
  await api("DELETE", "/api/teacher/session");
  window.location.assign("/teacher/login");
});

if (new URLSearchParams(window.location.search).has("deleted")) $("classes-status").textContent = "The class was deleted.";
loadClasses();
