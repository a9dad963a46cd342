"""An open page's stream opens with a reconnection delay of its own (SSE's `retry:`), drawn between 1 s and
`answer.page_reconnect_max_s`: when a pod rolls, the thousands of pages it drops come back spread over seconds
rather than all in the browser's default 3. An in-process service, no vLLM (no answer is asked for)."""

import re
from collections.abc import Iterator
from contextlib import closing

import httpx
import pytest

from service.app import create_app
from service.settings import AnswerSettings, Settings
from tests.helpers import add_passage, create_classroom, joined_pupil, passage_text, signed_in_teacher
from tests.servers import ServerThread, isolated

MAX_S = 4.0
RETRY = re.compile(rb"^retry: (\d+)\n")


@pytest.fixture(scope="module")
def school(settings: Settings) -> Iterator[tuple[str, httpx.Client, httpx.Client, str]]:
    own = isolated(settings, answer=AnswerSettings(page_reconnect_max_s=MAX_S))
    with ServerThread(create_app(own)) as running, closing(signed_in_teacher(own, running.url)) as teacher:
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(50))
        with closing(joined_pupil(running.url, classroom["join_code"], "Ada")) as pupil:
            yield running.url, teacher, pupil, classroom["id"]


def opening(client: httpx.Client, path: str, *, first_event: bool) -> tuple[int, bytes]:
    """The delay a page's stream opens with (ms), and what follows it: up to the first event's end if
    `first_event` (a teacher's feed has none until a question is asked)."""
    with client.stream("GET", path, timeout=10) as response:
        assert response.status_code == 200
        read = b""
        for chunk in response.iter_raw():
            read += chunk
            if RETRY.match(read) and (b"\n\n" in read or not first_event):
                break
    found = RETRY.match(read)
    assert found is not None, read
    return int(found.group(1)), read[found.end() :]


def test_each_page_stream_opens_with_a_random_delay_to_reconnect_after(
    school: tuple[str, httpx.Client, httpx.Client, str],
) -> None:
    _, teacher, pupil, classroom_id = school
    delays = []
    for _ in range(6):
        delay, rest = opening(pupil, "/api/pupil/events", first_event=True)
        assert rest.startswith(b"event: class\ndata: {")  # the field ends no event of its own: the first is the class
        delays.append(delay)
        delay, _ = opening(teacher, f"/api/classrooms/{classroom_id}/events", first_event=False)
        delays.append(delay)
    assert all(1000 <= d <= MAX_S * 1000 for d in delays), delays
    assert len(set(delays)) > 1, delays  # drawn for each stream: 12 equal of 3,001 would be chance once in 10**41
