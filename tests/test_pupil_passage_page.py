"""Point 2 of the pupils' page in a real headless Chromium: an open page is shown the passage the teacher
publishes, with a sentence; a page that missed the change is answered about the passage it shows, or refused
kindly (its question kept) if that passage was taken away; a closed class says so and Ask waits."""

import httpx
from playwright.sync_api import Browser, Page, expect

from tests.browser import CSP_BLOCKED, assert_accessible, join_in_browser, new_page, shot
from tests.helpers import add_passage, create_classroom, passage_text, stored_questions


def pupil_page(browser: Browser, service: str, code: str, name: str, title: str) -> Page:
    page = join_in_browser(new_page(browser, phone=True), service, code, name)
    expect(page.get_by_role("heading", name=title)).to_be_visible()
    return page


def publish(teacher: httpx.Client, classroom_id: str, passage_id: str) -> None:
    response = teacher.put(f"/api/classrooms/{classroom_id}/active-passage", json={"passage_id": passage_id})
    assert response.status_code == 200, response.text


def test_an_open_page_shows_the_passage_the_teacher_publishes(
    browser: Browser, teacher: httpx.Client, service: str
) -> None:
    classroom = create_classroom(teacher)
    cid = classroom["id"]
    add_passage(teacher, cid, passage_text(60), title="The honeybee")
    ada = pupil_page(browser, service, classroom["join_code"], "Ada", "The honeybee")
    expect(ada.locator("#passage-notice")).to_be_hidden()

    ants = add_passage(teacher, cid, "Ants live in nests under the ground.", title="The ant", publish=False)
    ada.wait_for_timeout(1500)  # prepared, not published: nothing moves on the pupil's page
    expect(ada.get_by_role("heading", name="The honeybee")).to_be_visible()

    publish(teacher, cid, ants["id"])
    expect(ada.get_by_role("heading", name="The ant")).to_be_visible()
    expect(ada.locator("#passage-text")).to_have_text("Ants live in nests under the ground.")
    expect(ada.locator("#passage-notice")).to_have_text(
        "Your teacher has changed the passage. You are now reading “The ant”."
    )
    assert_accessible(ada)
    shot(ada, "pupil-passage-changed")

    # Asked now, it is about the ant: the passage the page shows.
    box = ada.get_by_label("Your question", exact=True)
    box.fill("Where do ants live?")
    box.press("Enter")
    expect(ada.locator("#answer-box")).to_have_attribute("data-state", "ended", timeout=60_000)
    [asked] = stored_questions(teacher, cid)
    assert asked["passage_id"] == ants["id"]

    # Closed: the page says so and Ask waits; reopened, it asks again.
    assert teacher.patch(f"/api/classrooms/{cid}", json={"is_open": False}).status_code == 200
    expect(ada.locator("#class-closed")).to_be_visible()
    expect(ada.get_by_role("button", name="Ask", exact=True)).to_be_disabled()
    assert teacher.patch(f"/api/classrooms/{cid}", json={"is_open": True}).status_code == 200
    expect(ada.locator("#class-closed")).to_be_hidden()
    expect(ada.get_by_role("button", name="Ask", exact=True)).to_be_enabled()
    assert CSP_BLOCKED == []


def test_a_page_that_missed_the_change_is_answered_about_what_it_shows_or_refused_kindly(
    browser: Browser, teacher: httpx.Client, service: str
) -> None:
    classroom = create_classroom(teacher)
    cid = classroom["id"]
    bees = add_passage(teacher, cid, passage_text(60), title="The honeybee")
    ben = pupil_page(browser, service, classroom["join_code"], "Ben", "The honeybee")
    # The page hears nothing more of the class (as when its live connection is down).
    ben.route("**/api/pupil/events", lambda route: route.abort())
    ben.reload()
    expect(ben.get_by_role("heading", name="The honeybee")).to_be_visible()

    wasps = add_passage(teacher, cid, passage_text(60), title="The wasp", publish=True)
    box = ben.get_by_label("Your question", exact=True)
    box.fill("Who is the queen?")
    box.press("Enter")
    expect(ben.locator("#answer-box")).to_have_attribute("data-state", "ended", timeout=60_000)
    [asked] = stored_questions(teacher, cid)
    assert asked["passage_id"] == bees["id"]  # what Ben was reading, not what pupils see now

    # Now the honeybee is taken away: Ben's next question is refused in words, kept in its box, and the
    # page shows the passage to read now.
    assert teacher.delete(f"/api/classrooms/{cid}/passages/{bees['id']}").status_code == 204
    box.fill("Do bees sleep?")
    box.press("Enter")
    expect(ben.get_by_role("alert")).to_contain_text("changed or taken away the passage you were reading")
    expect(box).to_have_value("Do bees sleep?")
    expect(ben.get_by_role("heading", name="The wasp")).to_be_visible()
    assert len(stored_questions(teacher, cid)) == 1
    assert wasps["published"] is True
    assert_accessible(ben)
    assert CSP_BLOCKED == []
