"use strict";

$("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const response = await api("POST", "/api/teacher/session", { email: $("email").value, password: $("password").value });
  if (!response.ok) return ($("login-error").textContent = await errorMessage(response));
  window.location.assign("/teacher");
});
