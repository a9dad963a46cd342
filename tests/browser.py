"""Shared by the browser tests: Debian's Chromium under Playwright, screenshots, and the checks every page
must keep passing (labels, no sideways scrolling on a phone, no Content-Security-Policy report)."""

from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize, expect

from tests.servers import ROOT

SCREENSHOTS = ROOT / ".test-artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
# As the machine's own probe starts it: no sandbox as root, and no calls home on a closed network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NASTY = "<script>window.pwned = true</script><b>bold?</b>"
TIMEOUT_MS = 60_000
# Assertions wait as long as actions do: an answer on 2 shared cores can take longer than playwright's 5 s.
expect.set_options(timeout=TIMEOUT_MS)
# A phone held upright (an iPhone 12-14's CSS pixels).
PHONE: ViewportSize = {"width": 390, "height": 844}
DESK: ViewportSize = {"width": 1100, "height": 900}

CSP_BLOCKED: list[str] = []  # the browser's reports of what the pages' Content-Security-Policy refused


def watched(page: Page) -> Page:
    page.on("console", lambda m: CSP_BLOCKED.append(m.text) if "Content Security Policy" in m.text else None)
    page.set_default_timeout(TIMEOUT_MS)
    return page


def new_page(browser: Browser, *, phone: bool = False) -> Page:
    """A page in a context of its own (its own cookies): a phone held upright, or a desk's screen."""
    context: BrowserContext = (
        browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        if phone
        else browser.new_context(viewport=DESK)
    )
    return watched(context.new_page())


def join_in_browser(page: Page, url: str, code: str, name: str) -> Page:
    """The join page at `url`, filled in and sent as a pupil does; the caller expects what follows."""
    page.goto(f"{url}/")
    page.get_by_label("Class code").fill(code)
    page.get_by_label("Your first name").fill(name)
    page.get_by_role("button", name="Join").click()
    return page


def shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


# Form controls without a name a screen reader can say: a label, aria-label or aria-labelledby (hidden ones
# and those the page hides do not count).
UNLABELLED = """() => [...document.querySelectorAll("input, textarea, select, button")]
  .filter((e) => e.type !== "hidden" && e.offsetParent !== null)
  .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute("aria-label") && !e.getAttribute("aria-labelledby")
    && !(e.tagName === "BUTTON" && e.textContent.trim()))
  .map((e) => e.outerHTML.slice(0, 120))"""


def assert_accessible(page: Page) -> None:
    """Every visible control has a name; nothing is wider than the window (no sideways scrolling)."""
    assert page.evaluate(UNLABELLED) == [], "controls without a label"
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"the page scrolls sideways: {width[0]} px wide in a {width[1]} px window"
