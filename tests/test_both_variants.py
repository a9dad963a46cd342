"""`make run FP8=1` (`classroom up --fp8`): the small real model and its FP8_DYNAMIC copy, each on a vLLM-CPU of its
own and each named for what it is; the operator's console lists both with their health, switches between them and
sets a canary; a pupil reads real words from each. The copy is made once (deploy/scripts/compress-fp8.sh, whose
llmcompressor venv test_fp8 shares) and kept beside the model, as the model itself is."""

import re

import httpx
import pytest
from playwright.sync_api import Browser, expect

from loadtest.quality.rubric import load_rubrics, readable
from service.local.processes import free_port
from service.model_manifest import read_manifest
from service.settings import RedisSettings, Settings
from tests.browser import CSP_BLOCKED, assert_accessible, new_page, shot
from tests.figures import report
from tests.helpers import (
    add_passage,
    ask_json,
    ask_streaming,
    create_classroom,
    error_of,
    eventually,
    joined_pupil,
    routed_questions,
    signed_in_teacher,
)
from tests.local_stack import classroom_up
from tests.servers import SMALL_MODEL, Vllm

# A stack of its own, the FP8 path (llmcompressor's venv, the first time), a second vLLM and Chromium.
pytestmark = [pytest.mark.fp8, pytest.mark.slow]

FP8_COPY = SMALL_MODEL.with_name(f"{SMALL_MODEL.name}-fp8")
TOKEN = "both-variants-operator-token"
QUESTION = "Why do bees visit flowers?"
# A hang's bound for `classroom up --fp8`: the first time it installs llmcompressor (~1.5 GB) and compresses, and it
# starts a vLLM; the wait ends as soon as the stack answers.
FIRST_START_S = 1500
ANSWER_TOKENS = 32


def test_an_operator_switches_between_the_model_and_its_fp8_copy_and_pupils_read_words_from_both(
    small_vllm: Vllm, browser: Browser
) -> None:
    fp8_url = f"http://127.0.0.1:{free_port()}/v1"
    with classroom_up(
        small_vllm.base_url,  # the session's small model serves `original`: the stack starts only the FP8 vLLM
        "--fp8",
        ready_s=FIRST_START_S,
        CLASSROOM_MODEL__DIR=str(SMALL_MODEL),
        CLASSROOM_MODEL__SIZE="smollm2-135m",
        CLASSROOM_MODEL__STANDIN="false",
        CLASSROOM_MODEL__FP8_DIR=str(FP8_COPY),
        CLASSROOM_BACKEND__FP8_BASE_URL=fp8_url,
        CLASSROOM_AUTH__OPERATOR_TOKEN=TOKEN,
        # Short answers: vLLM-CPU runs the FP8 copy's matrices through torch's scaled_mm, a few tokens a second.
        CLASSROOM_ANSWER__MAX_TOKENS=str(ANSWER_TOKENS),
    ) as stack:
        said = stack.log.read_text()
        original, copy = read_manifest(SMALL_MODEL), read_manifest(FP8_COPY)
        assert original is not None and copy is not None and copy.quantization, said
        assert copy.served == original.served  # clients name one model; the variant says which copy answers
        assert f"{FP8_COPY} holds {copy.describe()}" in said and "this copy quantized: FP8_DYNAMIC" in said
        assert f"vLLM (fp8): ready at {fp8_url}, serving {FP8_COPY}" in said, said

        settings = Settings(redis=RedisSettings(url=stack.env["CLASSROOM_REDIS__URL"]))
        teacher = signed_in_teacher(settings, stack.url)
        classroom = create_classroom(teacher, "Class 5C")
        bees, _ = load_rubrics().find("The honeybee", QUESTION)
        add_passage(teacher, classroom["id"], bees.text, bees.title)
        pupil = joined_pupil(stack.url, classroom["join_code"], "Ada")
        operator = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)

        page = new_page(browser)
        page.goto(f"{stack.url}/operator")
        page.get_by_label("Operator token").fill(TOKEN)
        page.keyboard.press("Enter")
        expect(page.locator("#variant-list li")).to_have_text(
            [
                re.compile(rf"^fp8: {re.escape(copy.name)}, its FP8_DYNAMIC copy by llmcompressor \({FP8_COPY}\)$"),
                re.compile(rf"^original: {re.escape(original.name)} \({SMALL_MODEL}\)$"),
            ]
        )
        for url in (small_vllm.base_url, fp8_url):
            expect(page.locator("#replicas tr").filter(has_text=url)).to_contain_text("healthy", timeout=60_000)
        assert_accessible(page)

        answers = {}
        for variant in ("original", "fp8"):
            if variant != "original":
                page.get_by_label("Active variant").select_option(variant)
                page.get_by_role("button", name="Switch").click()
                expect(page.locator("#backend-status")).to_contain_text(f"Active: {variant}; no canary")
            streamed = ask_streaming(pupil, classroom["id"], QUESTION)
            assert streamed.error is None and streamed.done is not None, streamed
            answers[variant] = streamed.text
        report("both variants on the local stack: the answers", answers)
        for variant, answer in answers.items():
            assert readable(answer) and "bee" in answer.lower(), (variant, answer)
        routed = routed_questions(operator, classroom["id"])
        assert sorted(q["variant"] for q in routed) == ["fp8", "original"], routed

        # A canary of the original beside the active FP8 copy, set and ended on the console.
        page.get_by_label("Canary").select_option("original")
        page.get_by_label("share of pupils (%)").fill("25")
        page.get_by_role("button", name="Set canary").click()
        expect(page.locator("#backend-status")).to_contain_text("Active: fp8; canary: original for 25 % of pupils")
        canary = operator.get("/api/operator/backends").json()["config"]["canary"]
        assert canary == {"variant": "original", "percent": 25}
        shot(page, "operator-both-variants")
        page.get_by_role("button", name="End canary").click()
        expect(page.locator("#backend-status")).to_contain_text("Active: fp8; no canary")
        eventually(
            lambda: operator.get("/api/operator/backends").json()["config"]["canary"] is None, "the canary ended", 10
        )

        # The FP8 copy's vLLM killed (the active variant's only replica): the console says so, each question gets the
        # 503 sentence, and the service stays ready (no pod leaves an ingress for it) until the operator switches back.
        stack.children()["vllm"].kill()
        expect(page.locator("#backend-down")).to_contain_text(
            "No replica of the active variant fp8 is healthy", timeout=30_000
        )
        refused = ask_json(pupil, classroom["id"], "Are you there?")
        assert refused.status_code == 503 and "cannot be reached right now" in error_of(refused)["message"]
        assert httpx.get(f"{stack.url}/readyz").status_code == 200
        shot(page, "operator-active-variant-down")
        page.get_by_label("Active variant").select_option("original")
        page.get_by_role("button", name="Switch").click()
        expect(page.locator("#backend-status")).to_contain_text("Active: original; no canary")
        expect(page.locator("#backend-down")).to_have_text("")
        assert ask_streaming(pupil, classroom["id"], QUESTION).done is not None
        page.context.close()
        operator.close()
        teacher.close()
        pupil.close()
    assert CSP_BLOCKED == []
