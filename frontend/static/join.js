"use strict";

$("join-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const code = $("join-code").value.trim();
  const name = $("pupil-name").value.trim();
  if (!code) return ($("join-error").textContent = "Please type your class code.");
  if (!name) return ($("join-error").textContent = "Please type your first name.");
  const response = await api("POST", "/api/join", { join_code: code, name });
  if (!response.ok) return ($("join-error").textContent = await errorMessage(response));
  window.location.assign("/class");
});
