"""The pages in a real headless Chromium (Debian's), driven by Playwright: a teacher and two pupils.

Screenshots of every page are saved under tests.browser.SCREENSHOTS, printed at the end of the run.
"""

from pathlib import Path

from playwright.sync_api import Browser, expect

from service.settings import Settings
from tests.browser import CSP_BLOCKED, NASTY, assert_accessible, new_page, shot
from tests.documents import docx_bytes
from tests.helpers import PASSWORD, new_teacher_account

# Records every length the answer box passes through, to tell streaming from one late burst.
WATCH_ANSWER = """() => {
  window.answerLengths = [];
  const box = document.getElementById("answer");
  new MutationObserver(() => window.answerLengths.push(box.textContent.length))
    .observe(box, { childList: true, characterData: true, subtree: true });
}"""


def test_a_teacher_and_two_pupils_in_the_browser(
    browser: Browser, settings: Settings, service: str, tmp_path: Path
) -> None:
    email = new_teacher_account(settings)
    passage_file = tmp_path / "The honeybee.docx"
    passage_file.write_bytes(
        docx_bytes(
            [
                "Honeybees live in colonies of many thousands, with one queen and many workers.",
                "Worker bees carry pollen from flower to flower. This is called pollination.",
                "<script>window.pwned = true</script> is how the passage writes a tag, as text.",
            ]
        )
    )

    # The teacher signs in, creates a class and uploads a .docx passage.
    teacher = new_page(browser)
    teacher.goto(f"{service}/teacher")
    expect(teacher).to_have_url(f"{service}/teacher/login")
    shot(teacher, "teacher-sign-in")
    teacher.get_by_label("Email").fill(email)
    teacher.get_by_label("Password").fill("not the password")
    teacher.get_by_role("button", name="Sign in").click()
    expect(teacher.get_by_role("alert")).to_contain_text("do not match an account")
    teacher.get_by_label("Password").fill(PASSWORD)
    teacher.get_by_role("button", name="Sign in").click()
    expect(teacher.get_by_role("heading", name="Your classes")).to_be_visible()
    teacher.get_by_label("New class").fill(f"Class 4B {NASTY}")
    teacher.get_by_role("button", name="Create").click()
    expect(teacher.locator("#class-title")).to_have_text(f"Class 4B {NASTY}")
    teacher.get_by_text("Add a passage").click()
    teacher.get_by_label("Or upload a file").set_input_files(passage_file)
    teacher.get_by_label("Publish this file now").check()
    teacher.get_by_role("button", name="Upload", exact=True).click()
    expect(teacher.locator("#passages")).to_contain_text("The honeybee")
    expect(teacher.locator("#passages")).to_contain_text("pupils see this one")
    code = teacher.locator("#join-code").inner_text()
    shot(teacher, "teacher-class-before-questions")

    # Two pupils join on two pages; one uses the keyboard alone.
    pupils = []
    for _ in ("Ada", "Ben"):
        page = new_page(browser, phone=True)
        page.goto(f"{service}/")
        pupils.append(page)
    ada, ben = pupils
    assert_accessible(ada)
    shot(ada, "pupil-join")
    ada.get_by_label("Class code").fill("WRNG-CODE")
    ada.get_by_label("Your first name").fill("Ada")
    ada.get_by_role("button", name="Join").click()
    expect(ada.get_by_role("alert")).to_contain_text("There is no class with the code")
    ada.get_by_label("Class code").fill(code.lower())
    ada.get_by_role("button", name="Join").click()
    ben.get_by_label("Class code").focus()
    ben.keyboard.type(code)
    ben.keyboard.press("Tab")
    ben.keyboard.type("Ben")
    ben.keyboard.press("Enter")
    for page in pupils:
        expect(page.get_by_role("heading", name="The honeybee")).to_be_visible()
        expect(page.locator("#passage-text")).to_contain_text("<script>window.pwned = true</script>")

    # Both ask at the same time; both answers stream in.
    questions = {"Ada": "Why do bees visit flowers?", "Ben": f"What is pollination? {NASTY}"}
    for page, name in ((ada, "Ada"), (ben, "Ben")):
        page.evaluate(WATCH_ANSWER)
        page.get_by_label("Your question", exact=True).fill(questions[name])
    ada.get_by_role("button", name="Ask", exact=True).click()
    ben.get_by_label("Your question", exact=True).focus()
    ben.keyboard.press("Tab")  # the Ask button is next in the tab order
    ben.keyboard.press("Enter")
    for page, name in ((ada, "Ada"), (ben, "Ben")):
        # The answer ended; its question stays above it (and is not listed again below, in the history).
        expect(page.locator("#answer-box")).to_have_attribute("data-state", "ended")
        expect(page.locator("#current-question")).to_have_text(questions[name])
        expect(page.locator("#history li")).to_have_count(0)
        lengths = page.evaluate("window.answerLengths")
        assert len({n for n in lengths if n > 0}) > 2, f"{name}'s answer did not stream: {lengths}"
        expect(page.locator("#answer")).not_to_be_empty()
        assert_accessible(page)
        shot(page, f"pupil-{name.lower()}-answered")

    # The teacher's page showed both, live, without a reload.
    items = teacher.locator("#questions li")
    expect(items).to_have_count(2)
    for name, question in questions.items():
        expect(items.filter(has_text=f"{name}: {question}")).to_contain_text("answered")
    expect(teacher.locator("#stats")).to_contain_text("2 questions, 2 answered")
    assert_accessible(teacher)
    shot(teacher, "teacher-class-live-questions")

    # What anyone typed stayed text on every page.
    for page in (teacher, ada, ben):
        assert page.evaluate("window.pwned") is None
    assert teacher.locator("#questions b").count() == 0
    assert CSP_BLOCKED == []  # and the pages' own scripts and styles all ran under their policy


def test_pages_without_a_session_send_the_browser_to_sign_in_or_join(browser: Browser, service: str) -> None:
    page = browser.new_page()
    page.goto(f"{service}/class")
    expect(page).to_have_url(f"{service}/")
    expect(page.get_by_role("heading", name="Join your class")).to_be_visible()
    page.goto(f"{service}/teacher/classes/anything")
    expect(page).to_have_url(f"{service}/teacher/login")
    page.close()


def test_the_operator_console(browser: Browser, settings: Settings, service: str) -> None:
    page = new_page(browser)
    page.goto(f"{service}/operator")
    page.get_by_label("Operator token").fill("not the token")
    page.get_by_role("button", name="Open").click()
    expect(page.get_by_role("alert").first).to_contain_text("That is not the operator token.")
    page.get_by_label("Operator token").fill(settings.auth.operator_token.get_secret_value())
    page.get_by_role("button", name="Open").click()
    expect(page.locator("#replicas")).to_contain_text(settings.backend.base_url)
    expect(page.locator("#replicas")).to_contain_text("healthy")
    expect(page.locator("#backend-status")).to_contain_text("Active: original")
    expect(page.locator("#overall")).to_contain_text("questions")
    expect(page.locator("#by-classroom tr").first).to_be_visible()
    expect(page.locator("#ttft-plot canvas")).to_have_count(1)
    shot(page, "operator-console")
    page.close()
    assert CSP_BLOCKED == []  # uPlot and the console ran under the pages' policy
