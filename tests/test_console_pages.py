"""In a real headless Chromium: Back after signing out, the operator's console, and an unknown address."""

import re

import httpx
from playwright.sync_api import Browser, Locator, Page, expect

from service.settings import Settings
from tests.browser import CSP_BLOCKED, assert_accessible, join_in_browser, new_page, shot
from tests.helpers import PASSWORD, Join, add_passage, ask_json, create_classroom, new_teacher_account, passage_text

WRONG_TOKEN = "That is not the operator token. Check it for typing mistakes and try again."


def back(page: Page) -> None:
    page.go_back()
    page.wait_for_load_state()


def test_back_after_signing_out_shows_no_class_page(browser: Browser, settings: Settings, service: str) -> None:
    email = new_teacher_account(settings)
    teacher = new_page(browser)
    teacher.goto(f"{service}/teacher/login")
    teacher.get_by_label("Email").fill(email)
    teacher.get_by_label("Password").fill(PASSWORD)
    teacher.get_by_role("button", name="Sign in").click()
    expect(teacher.get_by_role("heading", name="Your classes")).to_be_visible()
    teacher.get_by_label("New class").fill("Class 6C, Friday")
    teacher.get_by_role("button", name="Create").click()
    expect(teacher.locator("#class-title")).to_have_text("Class 6C, Friday")
    code = teacher.locator("#join-code").inner_text()
    teacher.goto(f"{service}/teacher")
    expect(teacher.get_by_role("link", name="Class 6C, Friday")).to_be_visible()
    teacher.get_by_role("button", name="Sign out").click()
    expect(teacher).to_have_url(f"{service}/teacher/login")

    # Back, twice: over the list of classes and over the class page. Each asks the server again, which
    # sends a signed-out browser to sign in; neither page comes back out of a cache.
    for _ in range(2):
        back(teacher)
        expect(teacher).to_have_url(f"{service}/teacher/login")
        expect(teacher.get_by_role("heading", name="Teacher sign-in")).to_be_visible()
        assert "Class 6C" not in teacher.content() and code not in teacher.content()

    # A pupil who leaves: Back does not show the class.
    pupil = join_in_browser(new_page(browser, phone=True), service, code, "Ada")
    expect(pupil.get_by_role("heading", name="Class 6C, Friday")).to_be_visible()
    pupil.get_by_role("button", name="Leave").click()
    expect(pupil.get_by_role("heading", name="Join your class")).to_be_visible()
    back(pupil)
    expect(pupil).to_have_url(f"{service}/")
    expect(pupil.get_by_role("heading", name="Join your class")).to_be_visible()
    assert "Class 6C" not in pupil.content()
    for page in (teacher, pupil):
        page.context.close()


def test_the_operator_console_with_the_keyboard(
    browser: Browser, settings: Settings, service: str, teacher: httpx.Client, join: Join
) -> None:
    classroom = create_classroom(teacher, "Class 3A")
    add_passage(teacher, classroom["id"], passage_text(60))
    assert ask_json(join(classroom["join_code"], "Ada"), classroom["id"], "Why?").status_code == 200

    page = new_page(browser)
    page.goto(f"{service}/operator")
    forget = page.get_by_role("button", name="Forget the token")
    expect(forget).to_be_hidden()  # no token entered yet
    assert_accessible(page)

    # A wrong token, typed and sent with Enter: a sentence, not the API's wording.
    page.get_by_label("Operator token").focus()
    page.keyboard.type("not the token")
    page.keyboard.press("Enter")
    alert = page.locator("#token-error")
    expect(alert).to_have_text(WRONG_TOKEN)
    expect(alert).to_have_attribute("role", "alert")
    expect(forget).to_be_hidden()
    assert page.evaluate("sessionStorage.length") == 0  # a refused token is not kept
    shot(page, "operator-wrong-token")

    page.get_by_label("Operator token").fill(settings.auth.operator_token.get_secret_value())
    page.keyboard.press("Enter")
    expect(page.locator("#backend-status")).to_contain_text("Active: original")
    # The session's vLLM got its warm-up burst when the first service process saw it up.
    replica = page.locator("#replicas tr").filter(has_text=settings.backend.base_url)
    expect(replica).to_contain_text(re.compile(r"healthy.*warmed in \d+\.\d s"))
    expect(forget).to_be_visible()
    expect(page.get_by_role("alert").filter(has_text=WRONG_TOKEN)).to_have_count(0)

    # Four charts, each with a legend that says its values in words (other tests may add variants).
    def original_of(chart: str) -> Locator:
        return page.locator(f"#{chart}-legend li").filter(has_text=re.compile(r"^original: "))

    for chart in ("questions", "errors", "ttft", "cache"):
        expect(page.locator(f"#{chart}-plot canvas")).to_have_count(1)
    expect(original_of("questions")).to_have_text(re.compile(r"^original: \d+ this minute, [1-9]\d* in the hour$"))
    counts = re.compile(r"^original: \d+ this minute, \d+ in the hour$")
    expect(original_of("errors")).to_have_text(counts)
    expect(original_of("ttft")).to_have_text(
        re.compile(r"^original: p95 \d+ ms in the latest minute with questions, \d+ ms over the hour$")
    )
    expect(original_of("cache")).to_have_text(re.compile(r"^original: [\d.]+ % in the latest"))
    expect(page.locator("#questions-legend .swatch-0")).to_have_count(1)

    # The class by its code and teacher.
    row = page.locator("#by-classroom tr").filter(has_text=classroom["join_code"])
    expect(row).to_contain_text("Class 3A")
    expect(row).to_contain_text("Ms Rivera")

    # Switching to the variant already active, with the keyboard: nothing changes, and the page says so.
    version = re.search(r"version (\d+)", page.locator("#backend-status").inner_text())
    assert version is not None
    page.get_by_label("Active variant").focus()
    page.keyboard.press("Tab")  # to Switch
    page.keyboard.press("Enter")
    expect(page.locator("#backend-status")).to_contain_text("Nothing changed")
    expect(page.locator("#backend-status")).to_contain_text(f"configuration version {version.group(1)}")
    assert_accessible(page)
    shot(page, "operator-console-charts")

    # On a phone, too.
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.locator("#questions-plot canvas")).to_have_count(1)
    assert_accessible(page)
    shot(page, "operator-console-phone")

    forget.click()
    expect(page.get_by_label("Operator token")).to_be_visible()
    expect(forget).to_be_hidden()
    page.context.close()
    assert CSP_BLOCKED == []


def test_an_unknown_address_shows_a_page_with_a_way_home(browser: Browser, service: str) -> None:
    page = new_page(browser, phone=True)
    response = page.goto(f"{service}/teacher/clases")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", name="There is no page here")).to_be_visible()
    assert_accessible(page)
    shot(page, "not-found")
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon is not None and page.request.get(icon).status == 200
    page.get_by_role("link", name="Go to the start page").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Join your class")).to_be_visible()
    page.context.close()
    assert CSP_BLOCKED == []
