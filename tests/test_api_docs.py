"""/docs: the API's reference renders from the service's own files, under its CSP, with no other site reachable
(a school's offline set-up has none)."""

from playwright.sync_api import Browser, Request, expect

from service.app import create_app
from service.settings import Settings
from tests.browser import CSP_BLOCKED, new_page, shot
from tests.servers import ServerThread, isolated


def test_the_api_reference_renders_from_the_service_s_own_files(browser: Browser, settings: Settings) -> None:
    with ServerThread(create_app(isolated(settings))) as running:
        page = new_page(browser)
        elsewhere: list[str] = []

        def outside(request: Request) -> None:
            if not request.url.startswith((running.url, "data:")):
                elsewhere.append(request.url)

        page.on("request", outside)
        response = page.goto(f"{running.url}/docs")
        assert response is not None and response.status == 200
        expect(page.get_by_role("heading", name="classroom-assistant")).to_be_visible()
        join = page.locator(".opblock-summary-path", has_text="/api/join").first
        expect(join).to_be_visible()
        join.click()  # an operation opens with its schema
        expect(page.locator(".opblock-body").first).to_be_visible()
        shot(page, "api-docs")
        page.context.close()
    assert elsewhere == []
    assert CSP_BLOCKED == []
