"""Open teacher pages cost a process no Redis connection each: 200 live feeds of one class on one service
process (real Redis, real vLLM) share its one pub/sub connection, and every one of them hears the question."""

import asyncio
from contextlib import closing

import httpx
from redis import Redis

from service.app import create_app
from service.settings import Settings
from tests.helpers import (
    add_passage,
    ask_json,
    create_classroom,
    eventually,
    joined_pupil,
    passage_text,
    signed_in_teacher,
)
from tests.servers import ServerThread, isolated

FEEDS = 200


def connections_of(settings: Settings) -> tuple[int, int]:
    """Redis connections on the service's database (a database of its own: its process's alone), and how many
    of them listen to channels."""
    redis = Redis.from_url(settings.redis.url)
    try:
        db = int(settings.redis.url.rsplit("/", 1)[1])
        mine = [c for c in redis.client_list() if int(c["db"]) == db and c["cmd"] != "client|list"]
        return len(mine), sum(int(c["sub"]) + int(c["psub"]) > 0 for c in mine)
    finally:
        redis.close()


def gauge(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def subscribers(url: str) -> float:
    return gauge(url, "classroom_subscribers")


async def open_feeds(url: str, cookies: httpx.Cookies, classroom_id: str, ask: "asyncio.Future[None]") -> list[str]:
    """FEEDS live pages of the class; once all listen, `ask` is set; what each heard first."""
    opened = asyncio.Semaphore(0)
    limits = httpx.Limits(max_connections=FEEDS + 10)
    async with httpx.AsyncClient(base_url=url, cookies=cookies, timeout=120, limits=limits) as client:

        async def feed() -> str:
            async with client.stream("GET", f"/api/classrooms/{classroom_id}/events") as response:
                assert response.status_code == 200
                opened.release()
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        return line
            raise AssertionError("the feed ended before a question")

        feeds = [asyncio.create_task(feed()) for _ in range(FEEDS)]
        for _ in range(FEEDS):
            await opened.acquire()
        await ask
        return await asyncio.gather(*feeds)


def test_two_hundred_teacher_pages_share_one_redis_connection_and_all_hear_the_question(
    vllm_settings: Settings,
) -> None:
    own = isolated(vllm_settings)
    with ServerThread(create_app(own)) as running, closing(signed_in_teacher(own, running.url)) as teacher:
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(100))
        connections_before, listening_before = connections_of(own)  # the pool's warm connections
        subscribers_before = subscribers(running.url)
        assert gauge(running.url, "classroom_open_pages") == 0
        assert listening_before == 1  # the process's own listeners (class changes, Stops, turns) share one

        async def scenario() -> list[str]:
            ask: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            pages = asyncio.create_task(open_feeds(running.url, teacher.cookies, classroom["id"], ask))
            # Every page listens once the process counts them (a page subscribes as its stream starts).
            await asyncio.to_thread(
                eventually, lambda: subscribers(running.url) >= subscribers_before + FEEDS, "all 200 pages listened", 60
            )
            connections, listening = connections_of(own)
            # Before, each page held a connection of its own: 200 listening. The pool may have grown while 200
            # pages opened at once (each reads the teacher's session and the class), never past its size.
            assert listening == 1, "the pages share the process's one pub/sub connection"
            assert connections <= own.redis.max_connections, (connections_before, connections)
            # The open pages' pods scale on this gauge (deploy/k8s/pages.yaml).
            assert await asyncio.to_thread(gauge, running.url, "classroom_open_pages") == FEEDS
            with closing(joined_pupil(running.url, classroom["join_code"], "Ada")) as ada:
                response = await asyncio.to_thread(ask_json, ada, classroom["id"], "Who is in the story?")
            assert response.status_code == 200, response.text
            ask.set_result(None)
            return await pages

        heard = asyncio.run(scenario())
        assert len(heard) == FEEDS and all("Who is in the story?" in line for line in heard)
        # Pages gone, their subscriptions go: the count comes back to the process's own listeners.
        eventually(lambda: subscribers(running.url) == subscribers_before, "the pages' subscriptions ended", 30)
        eventually(lambda: gauge(running.url, "classroom_open_pages") == 0, "the open pages counted gone", 30)
