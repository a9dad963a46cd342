"""The teacher's pages in a real headless Chromium (Debian's) under Playwright: publishing as a step of its
own, editing, previewing and deleting passages; the questions feed (short answers, pages, the pupil list);
plain words; archiving and deleting a class. Each also on a phone held upright, and with the keyboard."""

from contextlib import closing
from pathlib import Path

import httpx
from playwright.sync_api import Browser, Page, expect

from service.settings import Settings
from tests.browser import CSP_BLOCKED, assert_accessible, join_in_browser, new_page, shot
from tests.documents import docx_bytes
from tests.helpers import (
    PASSWORD,
    add_passage,
    create_classroom,
    joined_pupil,
    new_teacher_account,
    passage_text,
    seed_questions,
)

BEES = "Honeybees live in colonies of many thousands, with one queen and many workers."
ANTS = "Ants live in nests under the ground, and each nest has its own queen."
LONG_ANSWER = " ".join(f"Sentence {i} of a long answer that goes on and on about bees and flowers." for i in range(30))


def signed_in(browser: Browser, settings: Settings, service: str, *, phone: bool = False) -> tuple[Page, str]:
    """A page of a new teacher, signed in through the sign-in page; and the teacher's email."""
    email = new_teacher_account(settings)
    page = new_page(browser, phone=phone)
    page.goto(f"{service}/teacher/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Your classes")).to_be_visible()
    return page, email


def api_client(service: str, email: str) -> httpx.Client:
    client = httpx.Client(base_url=service, timeout=60)
    client.post("/api/teacher/session", json={"email": email, "password": PASSWORD}).raise_for_status()
    return client


def test_adding_and_publishing_are_two_steps_and_passages_can_be_read_edited_and_deleted(
    browser: Browser, settings: Settings, service: str, tmp_path: Path
) -> None:
    teacher, _ = signed_in(browser, settings, service)
    teacher.get_by_label("New class").fill("Class 4B")
    teacher.get_by_role("button", name="Create").click()
    expect(teacher.locator("#published-state")).to_have_text("Pupils see no passage yet: add one, then publish it.")

    # The first passage, added without publishing: pupils see none yet, and the form is empty again.
    teacher.get_by_text("Add a passage").click()
    teacher.get_by_label("Title", exact=True).fill("Bees")
    teacher.get_by_label("Text", exact=True).fill(BEES)
    teacher.get_by_role("button", name="Add this text").click()
    expect(teacher.locator("#passage-status")).to_contain_text("“Bees” added. It is not published yet")
    expect(teacher.locator("#passage-status")).to_contain_text("words longer")
    expect(teacher.get_by_label("Title", exact=True)).to_have_value("")
    expect(teacher.get_by_label("Text", exact=True)).to_have_value("")
    expect(teacher.locator("#published-state")).to_have_text("Pupils see no passage yet: publish one.")
    code = teacher.locator("#join-code").inner_text()
    pupil = join_in_browser(new_page(browser, phone=True), service, code, "Ada")
    expect(pupil.get_by_role("heading", name="No passage yet")).to_be_visible()

    # Published with the keyboard alone: pupils see it.
    teacher.get_by_role("button", name="Publish “Bees”").focus()
    teacher.keyboard.press("Enter")
    expect(teacher.locator("#published-state")).to_have_text("Pupils see “Bees”.")
    pupil.reload()
    expect(pupil.get_by_role("heading", name="Bees")).to_be_visible()

    # A second passage, mid-lesson: added, not published; pupils still read the first.
    teacher.get_by_label("Title", exact=True).fill("Ants")
    teacher.get_by_label("Text", exact=True).fill(ANTS)
    teacher.get_by_role("button", name="Add this text").click()
    status = teacher.locator("#passage-status")
    expect(status).to_contain_text("“Ants” added. It is not published: pupils still see “Bees”.")
    expect(teacher.get_by_label("Title", exact=True)).to_have_value("")
    pupil.reload()
    expect(pupil.get_by_role("heading", name="Bees")).to_be_visible()
    expect(pupil.locator("#passage-text")).to_contain_text(BEES)
    teacher.get_by_role("button", name="Publish “Ants”").click()
    expect(teacher.locator("#published-state")).to_have_text("Pupils see “Ants”.")
    pupil.reload()
    expect(pupil.get_by_role("heading", name="Ants")).to_be_visible()
    expect(pupil.locator("#passage-text")).to_contain_text(ANTS)

    # Read a passage in full on demand, then edit the one pupils see: a new version, which they see.
    teacher.get_by_role("button", name="Read “Bees”").click()
    expect(teacher.locator("#preview")).to_contain_text(BEES)
    expect(teacher.get_by_role("button", name="Close", exact=True)).to_be_focused()
    teacher.keyboard.press("Enter")
    expect(teacher.locator("#preview")).to_be_hidden()
    teacher.get_by_role("button", name="Edit “Ants”").click()
    expect(teacher.get_by_label("Title of the new version")).to_be_focused()
    teacher.get_by_label("Text of the new version").fill(ANTS + " Some ants farm fungus.")
    teacher.get_by_role("button", name="Save the new version").click()
    expect(teacher.locator("#passage-status")).to_have_text("Saved “Ants” as version 2. Pupils see this version now.")
    expect(teacher.locator("#passages")).to_contain_text("version 2")
    pupil.reload()
    expect(pupil.locator("#passage-text")).to_contain_text("Some ants farm fungus.")

    # Delete asks first, in place; the passage pupils see offers no Delete at all.
    expect(teacher.get_by_role("button", name="Delete “Ants”")).to_have_count(0)
    teacher.get_by_role("button", name="Delete “Bees”").click()
    expect(teacher.get_by_role("button", name="Keep it")).to_be_focused()
    teacher.keyboard.press("Enter")
    expect(teacher.locator("#passages li")).to_have_count(2)
    teacher.get_by_role("button", name="Delete “Bees”").click()
    teacher.get_by_role("button", name="Delete for good").click()
    expect(teacher.locator("#passage-status")).to_have_text("“Bees” deleted.")
    expect(teacher.locator("#passages li")).to_have_count(1)
    expect(teacher.locator("#filter-passage")).to_contain_text("Bees")  # its questions keep it, in the filter

    # An upload is titled by the document itself, not by the scanner's file name.
    scan = tmp_path / "scan_0042.docx"
    scan.write_bytes(docx_bytes([BEES], title="The Honeybee Colony"))
    teacher.get_by_label("Or upload a file").set_input_files(scan)
    teacher.get_by_role("button", name="Upload", exact=True).click()
    expect(teacher.locator("#passage-status")).to_contain_text("“The Honeybee Colony” added. It is not published")
    expect(teacher.locator("#passages")).to_contain_text("The Honeybee Colony")
    expect(teacher.get_by_label("Or upload a file")).to_have_value("")
    assert "token" not in teacher.locator("main").inner_text().lower()
    assert_accessible(teacher)
    shot(teacher, "teacher-passages-two-steps")
    assert CSP_BLOCKED == []


def test_the_questions_feed_in_plain_words_with_short_answers_pages_and_a_list_of_names(
    browser: Browser, settings: Settings, service: str
) -> None:
    teacher, email = signed_in(browser, settings, service, phone=True)
    with closing(api_client(service, email)) as client:
        classroom = create_classroom(client, "Class 6C")
        passage = add_passage(client, classroom["id"], passage_text(80), title="Bees")
    names = [("Ada", 1), ("ada", 2), ("Ben", 1)]
    for name, _ in names:
        joined_pupil(service, classroom["join_code"], name).close()
    seed_questions(settings, classroom["id"], passage["id"], names, 60, LONG_ANSWER)
    teacher.goto(f"{service}/teacher/classes/{classroom['id']}")

    # The newest 50, answers cut to a few lines with "Show all"; plain words, no tokens.
    items = teacher.locator("#questions > li")
    expect(items).to_have_count(50)
    newest = items.first
    expect(newest).to_contain_text("Ben: Question 60 from Ben?")
    expect(newest).to_contain_text("answered in 2.1 seconds (first words after 0.4 seconds)")
    expect(newest).to_contain_text("words reused from the passage: 96 %")
    expect(teacher.locator("#stats")).to_contain_text("reused from memory")
    assert "token" not in teacher.locator("main").inner_text().lower()
    answer = newest.locator(".a")
    short = answer.bounding_box()
    more = newest.get_by_role("button", name="Show all")
    expect(more).to_have_attribute("aria-expanded", "false")
    more.focus()
    teacher.keyboard.press("Enter")
    expect(newest.get_by_role("button", name="Show less")).to_have_attribute("aria-expanded", "true")
    opened = answer.bounding_box()
    assert short is not None and opened is not None and opened["height"] > 3 * short["height"]
    assert_accessible(teacher)
    shot(teacher, "teacher-feed-phone")

    # Older questions, appended; then it says there are no more.
    teacher.get_by_role("button", name="Older questions").click()
    expect(items).to_have_count(60)
    expect(items.last).to_contain_text("Question 1 from Ada?")
    expect(teacher.locator("#older-state")).to_have_text("There are no older questions.")
    expect(teacher.get_by_role("button", name="Older questions")).to_be_hidden()

    # The pupil filter lists the class's names, the two Adas told apart, and matches part of a name.
    options = teacher.locator("#pupil-names option")
    expect(options).to_have_count(3)
    assert [options.nth(i).get_attribute("value") for i in range(3)] == ["Ada", "ada (2)", "Ben"]
    pupil_filter = teacher.get_by_label("Pupil", exact=True)
    show = teacher.get_by_role("button", name="Show", exact=True)
    pupil_filter.fill("ada (2)")
    show.click()
    expect(items).to_have_count(20)
    for text in items.locator(".q").all_inner_texts():
        assert text.startswith("ada (2): Question")
    pupil_filter.fill("AD")
    show.click()
    expect(items).to_have_count(40)
    pupil_filter.fill("Zed")
    show.click()
    expect(teacher.locator("#no-questions")).to_have_text("No questions match.")
    assert_accessible(teacher)
    assert CSP_BLOCKED == []


def test_classes_are_listed_with_their_dates_and_questions_archived_restored_and_deleted(
    browser: Browser, settings: Settings, service: str
) -> None:
    teacher, email = signed_in(browser, settings, service, phone=True)
    with closing(api_client(service, email)) as client:
        busy = create_classroom(client, "Class 3A")
        passage = add_passage(client, busy["id"], passage_text(60), title="Bees")
        seed_questions(settings, busy["id"], passage["id"], [("Ada", 1)], 3, "Because.")
        quiet = create_classroom(client, "Class 3B")
    teacher.reload()
    classes = teacher.locator("#classes > li")
    expect(classes).to_have_count(2)
    expect(classes.filter(has_text="Class 3A")).to_contain_text("3 questions")
    expect(classes.filter(has_text="Class 3B")).to_contain_text("0 questions")
    expect(classes.first).to_contain_text("made ")
    expect(teacher.get_by_role("heading", name="Archived classes")).to_be_hidden()
    assert_accessible(teacher)

    # Archived from its page: pupils are told, and the list shows it apart, with Restore.
    teacher.get_by_role("link", name="Class 3A").click()
    teacher.get_by_role("button", name="Archive this class").click()
    expect(teacher.locator("#open-state")).to_contain_text("This class is archived")
    pupil = join_in_browser(new_page(browser, phone=True), service, busy["join_code"], "Ben")
    expect(pupil.get_by_role("alert")).to_contain_text("put away by the teacher")
    teacher.get_by_role("link", name="All classes").click()
    expect(teacher.get_by_role("heading", name="Archived classes")).to_be_visible()
    expect(teacher.locator("#archived li")).to_contain_text("Class 3A")
    expect(classes).to_have_count(1)
    shot(teacher, "teacher-classes-archived")
    assert_accessible(teacher)
    teacher.get_by_role("button", name="Restore “Class 3A”").click()
    expect(teacher.locator("#classes-status")).to_have_text("“Class 3A” is back among your classes.")
    expect(classes).to_have_count(2)
    expect(teacher.get_by_role("heading", name="Archived classes")).to_be_hidden()
    pupil.get_by_role("button", name="Join").click()
    expect(pupil.get_by_role("heading", name="Bees")).to_be_visible()

    # Deleted after typing its name, with the keyboard; its page then says there is no class there.
    teacher.get_by_role("link", name="Class 3B").click()
    class_url = teacher.url
    teacher.get_by_text("Delete this class", exact=True).click()
    delete = teacher.get_by_role("button", name="Delete this class for good")
    expect(delete).to_be_disabled()
    teacher.get_by_label("Type the class name to confirm").fill("Class 3")
    expect(delete).to_be_disabled()
    teacher.get_by_label("Type the class name to confirm").fill("Class 3B")
    expect(delete).to_be_enabled()
    assert_accessible(teacher)
    teacher.keyboard.press("Tab")
    expect(delete).to_be_focused()
    teacher.keyboard.press("Enter")
    expect(teacher).to_have_url(f"{service}/teacher?deleted=1")
    expect(teacher.locator("#classes-status")).to_have_text("The class was deleted.")
    expect(classes).to_have_count(1)
    response = teacher.goto(class_url)
    assert response is not None and response.status == 404
    expect(teacher.get_by_role("heading", name="There is no class here")).to_be_visible()
    assert_accessible(teacher)
    shot(teacher, "teacher-no-class")
    teacher.get_by_role("link", name="Go to your classes").click()
    expect(teacher.get_by_role("heading", name="Your classes")).to_be_visible()
    assert quiet["id"] not in teacher.content()
    assert CSP_BLOCKED == []
