"use strict";

const nameInput = $("pupil-name");
const nameMax = Number(nameInput.dataset.maxChars);

// A name over the limit is said in words as it is typed, never cut short.
function nameTooLong() {
  const n = [...nameInput.value.trim()].length;
  return n > nameMax ? `Your name is too long (${n} letters; the most is ${nameMax}). Please type just your first name.` : "";
}

nameInput.addEventListener("input", () => {
  const sentence = nameTooLong();
  nameInput.setAttribute("aria-invalid", sentence ? "true" : "false");
  if (sentence || $("join-error").dataset.tooLong) $("join-error").textContent = sentence;
  $("join-error").dataset.tooLong = sentence ? "yes" : "";
});

$("join-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const code = $("join-code").value.trim();
  const name = nameInput.value.trim();
  if (!code) return ($("join-error").textContent = "Please type your class code.");
  if (!name) return ($("join-error").textContent = "Please type your first name.");
  const tooLong = nameTooLong();
  if (tooLong) return ($("join-error").textContent = tooLong);
  const response = await api("POST", "/api/join", { join_code: code, name });
  if (!response.ok) return ($("join-error").textContent = await errorMessage(response));
  window.location.assign("/class");
});
