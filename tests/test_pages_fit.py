"""The pages fit a phone and a desk whatever the class writes: a pupil reaches the question box and the answer
without scrolling past a whole passage, and a name of one long word wraps rather than widen the page. Pages and
their data only (no answer is asked for): an in-process service, no vLLM."""

from collections.abc import Iterator
from contextlib import closing

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from service.app import create_app
from service.settings import Settings
from tests.browser import CSP_BLOCKED, assert_accessible, join_in_browser, new_page, shot
from tests.helpers import PASSWORD, add_passage, create_classroom, new_teacher_account, passage_text
from tests.servers import ServerThread, isolated

LONG_NAME = "Class" + "x" * 95  # 100 letters, no space to break at
# The passage's top to the bottom of the question box, at most, on a phone held upright: a screen.
QUESTION_WITHIN = "() => document.getElementById('question').getBoundingClientRect().bottom - document.getElementById('passage').getBoundingClientRect().top"  # noqa: E501


@pytest.fixture(scope="module")
def school(settings: Settings) -> Iterator[tuple[str, str, str, str]]:
    """A service of its own, and a class of a long name with a long passage: its url, teacher, class id, code."""
    own = isolated(settings)
    with ServerThread(create_app(own)) as running:
        email = new_teacher_account(own)
        with closing(signed_in_client(running.url, email)) as teacher:
            classroom = create_classroom(teacher, LONG_NAME)
            add_passage(teacher, classroom["id"], passage_text(1300), title="The honeybee")
        yield running.url, email, classroom["id"], classroom["join_code"]


def signed_in_client(url: str, email: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=60)
    client.post("/api/teacher/session", json={"email": email, "password": PASSWORD}).raise_for_status()
    return client


def pupil(browser: Browser, url: str, code: str, *, phone: bool) -> Page:
    page = join_in_browser(new_page(browser, phone=phone), url, code, "Ada")
    expect(page.get_by_role("heading", name="The honeybee")).to_be_visible()
    return page


@pytest.mark.parametrize("phone", [True, False], ids=["phone", "desk"])
def test_a_pupil_reaches_the_question_box_within_a_screen_of_a_long_passage(
    browser: Browser, school: tuple[str, str, str, str], phone: bool
) -> None:
    url, _, _, code = school
    page = pupil(browser, url, code, phone=phone)
    words = len(page.locator("#passage-text").inner_text().split())
    assert words > 900, words
    if phone:
        reach, screen = page.evaluate(QUESTION_WITHIN), page.evaluate("innerHeight")
        assert reach <= screen, f"the question box ends {reach:.0f} px below the passage's top, on a {screen} px screen"
        passage = page.locator("#passage-text")
        passage.focus()  # its own scroll, by the keyboard too
        page.keyboard.press("End")
        expect(passage).to_be_in_viewport()
    expect(page.get_by_role("heading", name=LONG_NAME)).to_be_visible()
    assert_accessible(page)
    shot(page, f"pupil-long-passage-{'phone' if phone else 'desk'}")
    page.context.close()
    assert CSP_BLOCKED == []


@pytest.mark.parametrize("phone", [True, False], ids=["phone", "desk"])
def test_a_class_name_of_one_long_word_wraps_on_the_teacher_s_pages(
    browser: Browser, school: tuple[str, str, str, str], phone: bool
) -> None:
    url, email, classroom_id, _ = school
    page = new_page(browser, phone=phone)
    page.goto(f"{url}/teacher/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Your classes")).to_be_visible()
    expect(page.get_by_text(LONG_NAME).first).to_be_visible()
    assert_accessible(page)
    shot(page, f"teacher-classes-long-name-{'phone' if phone else 'desk'}")
    page.goto(f"{url}/teacher/classes/{classroom_id}")
    expect(page.get_by_role("heading", name=LONG_NAME)).to_be_visible()
    for filled_in in ("#toggle-open", "#toggle-archive"):  # their words come with the class's state
        expect(page.locator(filled_in)).not_to_be_empty()
    assert_accessible(page)
    shot(page, f"teacher-class-long-name-{'phone' if phone else 'desk'}")
    page.context.close()
    assert CSP_BLOCKED == []
