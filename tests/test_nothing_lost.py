"""Nothing is lost: Redis killed mid-class comes back with every question and answer."""

import os
import signal
import threading
from contextlib import closing
from typing import Any

import httpx
from httpx_sse import connect_sse
from redis import Redis

from service.app import create_app
from service.local.processes import free_port
from service.local.redis_server import start_redis
from service.settings import RedisSettings, Settings
from service.store.keys import Keys
from tests.helpers import (
    Join,
    add_passage,
    ask_json,
    ask_streaming,
    create_classroom,
    eventually,
    joined_pupil,
    passage_text,
    signed_in_teacher,
    stored_questions,
)
from tests.servers import STATE, ServerThread


def numsub(redis: Redis, channel: str) -> int:
    """How many connections listen to `channel`: one once a process's feed has subscribed, however many pages."""
    return int(dict(redis.pubsub_numsub(channel))[channel.encode()])


def test_redis_killed_mid_class_comes_back_with_every_question_and_answer(vllm_settings: Settings) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    data_dir, log = STATE / f"redis-restart-{port}", STATE / "logs" / f"redis-restart-{port}.log"
    redis = start_redis(url, port, data_dir, log)
    own = vllm_settings.model_copy(update={"redis": RedisSettings(url=url)})
    try:
        with ServerThread(create_app(own)) as service, closing(signed_in_teacher(own, service.url)) as teacher:
            classroom = create_classroom(teacher)
            add_passage(teacher, classroom["id"], passage_text(150))
            pupils = [joined_pupil(service.url, classroom["join_code"], name) for name in ("Ada", "Ben", "Cy")]
            for pupil, question in zip(pupils, ("Why?", "How?", "When?"), strict=True):
                assert ask_json(pupil, classroom["id"], question).status_code == 200
            before = stored_questions(teacher, classroom["id"])
            detail_before = teacher.get(f"/api/classrooms/{classroom['id']}").json()

            # A crash, not a polite shutdown: every write was fsynced before Redis answered it.
            os.killpg(redis.pid, signal.SIGKILL)
            assert redis.popen is not None
            redis.popen.wait()
            ready = httpx.get(f"{service.url}/readyz", timeout=10)
            assert ready.status_code == 503 and ready.json()["redis"].startswith("unreachable")
            redis = start_redis(url, port, data_dir, log)

            # The same service process, the same sessions: everything reads back as it was.
            assert stored_questions(teacher, classroom["id"]) == before
            assert teacher.get(f"/api/classrooms/{classroom['id']}").json() == detail_before
            assert [q["status"] for q in before] == ["answered"] * 3 and all(q["answer"] for q in before)
            assert ask_json(pupils[0], classroom["id"], "And after?").status_code == 200
            assert len(stored_questions(teacher, classroom["id"])) == 4
            for pupil in pupils:
                pupil.close()
    finally:
        redis.stop()


def test_the_teachers_live_feed_shows_questions_as_they_are_asked_and_answered(
    settings: Settings, teacher: httpx.Client, join: Join
) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(80))
    seen: list[dict[str, Any]] = []
    subscribed = threading.Event()

    def listen() -> None:
        with (
            httpx.Client(base_url=teacher.base_url, cookies=teacher.cookies, timeout=30) as client,
            connect_sse(client, "GET", f"/api/classrooms/{classroom['id']}/events") as source,
        ):
            subscribed.set()
            for event in source.iter_sse():
                if event.event == "question":
                    seen.append(event.json())
                if len(seen) == 2:
                    return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert subscribed.wait(10)
    # The response starts before the feed subscribes: a question asked in between would be published to nobody.
    channel = Keys.events(classroom["id"])
    with Redis.from_url(settings.redis.url) as redis:
        eventually(lambda: numsub(redis, channel) > 0, "the live feed listened on Redis", 10, every_s=0.02)
    streamed = ask_streaming(join(classroom["join_code"], "Ada"), classroom["id"], "Live?")
    listener.join(15)
    assert [(e["id"], e["status"]) for e in seen] == [
        (streamed.question_id, "answering"),
        (streamed.question_id, "answered"),
    ]
    assert seen[1]["answer"] == streamed.text and seen[1]["pupil"] == "Ada"
