"""A pupil is never answered about a passage they cannot see: open pages are told when the teacher publishes
another passage (or closes the class), and a question names the passage its pupil was reading."""

import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from httpx_sse import connect_sse

from service.settings import Settings
from tests.helpers import Join, add_passage, create_classroom, error_of, passage_text, stored_questions
from tests.servers import service_process

NOTICE_WAIT_S = 10


class Notices:
    """The `class` events of a pupil's page, read in a thread as the page's EventSource would."""

    def __init__(self) -> None:
        self.received: queue.Queue[dict[str, Any]] = queue.Queue()

    def next(self) -> dict[str, Any]:
        return self.received.get(timeout=NOTICE_WAIT_S)

    def none_within(self, seconds: float) -> bool:
        try:
            self.received.get(timeout=seconds)
        except queue.Empty:
            return True
        return False


@contextmanager
def class_notices(base_url: str, cookies: httpx.Cookies) -> Iterator[Notices]:
    notices = Notices()
    stop = threading.Event()

    def read() -> None:
        try:
            with (
                httpx.Client(base_url=base_url, cookies=cookies, timeout=60) as client,
                connect_sse(client, "GET", "/api/pupil/events") as source,
            ):
                assert source.response.status_code == 200, source.response.read()
                for event in source.iter_sse():
                    if stop.is_set():
                        return
                    if event.event == "class":
                        notices.received.put(json.loads(event.data))
        except httpx.TransportError:
            # The page's stream stays open after its test (nothing wakes this thread's read) until the server stops
            # and cuts it: expected then, a failure before.
            if not stop.is_set():
                raise

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    yield notices
    stop.set()


def ask(pupil: httpx.Client, classroom_id: str, question: str, passage_id: str | None) -> httpx.Response:
    return pupil.post(
        f"/api/classrooms/{classroom_id}/questions",
        json={"question": question, "passage_id": passage_id},
        headers={"Accept": "application/json"},
    )


def test_an_open_page_is_told_the_new_passage_and_a_question_is_answered_about_the_one_read(
    teacher: httpx.Client, join: Join, service: str
) -> None:
    classroom = create_classroom(teacher)
    first = add_passage(teacher, classroom["id"], passage_text(80), title="The honeybee")
    ada = join(classroom["join_code"], "Ada")
    with class_notices(service, ada.cookies) as notices:
        shown = notices.next()
        assert shown == {
            "is_open": True,
            "passage": {"id": first["id"], "title": "The honeybee", "text": shown["passage"]["text"]},
        }

        second = add_passage(teacher, classroom["id"], passage_text(80), title="The ant")
        told = notices.next()
        assert told["passage"]["id"] == second["id"] and told["passage"]["title"] == "The ant"

        # Ada had not looked up yet: her question is about the honeybee, and is answered about it.
        response = ask(ada, classroom["id"], "Who is the queen?", first["id"])
        assert response.status_code == 200, response.text
        # Without a passage named, the one pupils see now.
        assert ask(ada, classroom["id"], "And the workers?", None).status_code == 200
        stored = {q["question"]: q["passage_id"] for q in stored_questions(teacher, classroom["id"])}
        assert stored == {"Who is the queen?": first["id"], "And the workers?": second["id"]}

        assert teacher.patch(f"/api/classrooms/{classroom['id']}", json={"is_open": False}).status_code == 200
        assert notices.next() == {**told, "is_open": False}
        # A change pupils cannot see (a new name) tells no page anything.
        assert teacher.patch(f"/api/classrooms/{classroom['id']}", json={"name": "Class 5A"}).status_code == 200
        assert notices.none_within(1.5)


def test_a_question_about_a_passage_that_is_not_the_class_s_is_refused_kindly(
    teacher: httpx.Client, join: Join
) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(60))
    elsewhere = create_classroom(teacher, "Class 4C")
    other = add_passage(teacher, elsewhere["id"], passage_text(60))
    ada = join(classroom["join_code"], "Ada")

    response = ask(ada, classroom["id"], "What do bees eat?", other["id"])
    assert response.status_code == 409
    assert error_of(response)["code"] == "passage_gone"
    assert "changed or taken away the passage you were reading" in error_of(response)["message"]
    assert stored_questions(teacher, classroom["id"]) == []  # nothing asked, nothing half-stored


def test_pages_on_another_service_process_are_told_too(settings: Settings, teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(60))
    ada = join(classroom["join_code"], "Ada")
    # The same Redis, another process: the teacher's write reaches it over the channel.
    with service_process(settings) as other, class_notices(other.url, ada.cookies) as notices:
        assert notices.next()["passage"] is not None
        newer = add_passage(teacher, classroom["id"], passage_text(60), title="The wasp")
        assert notices.next()["passage"]["id"] == newer["id"]
