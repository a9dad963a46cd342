"use strict";

async function loadClasses() {
  const response = await api("GET", "/api/classrooms");
  if (response.status === 401) return window.location.assign("/teacher/login");
  const { classrooms } = await response.json();
  $("classes").replaceChildren(
    ...classrooms.map((c) =>
      el("li", {},
        el("a", { text: c.name, attrs: { href: `/teacher/classes/${c.id}` } }),
        el("span", { className: "meta", text: ` · code ${c.join_code}${c.is_open ? "" : " · closed"}` }))));
  $("no-classes").hidden = classrooms.length > 0;
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

loadClasses();
