"""A Redis at its memory bound (maxmemory, noeviction), filled for real: a pupil's question is refused with a
sentence (507), nothing stored is dropped, the operator sees the store's use against its bound, and once room
is made the class asks again."""

from contextlib import closing

import httpx
import redis

from service.app import create_app
from service.local.processes import free_port
from service.local.redis_server import start_redis
from service.settings import RedisSettings, Settings
from tests.helpers import (
    add_passage,
    ask_json,
    create_classroom,
    error_of,
    joined_pupil,
    operator_headers,
    passage_text,
    signed_in_teacher,
    stored_questions,
)
from tests.servers import STATE, ServerThread

BOUND_MB = 24


def fill(client: redis.Redis) -> int:
    """Filler written until Redis refuses even the smallest: how many values it took. Large ones first, then
    smaller (a refused command's own buffer is freed after it, which leaves room for a smaller one)."""
    n = 0
    for size in (65536, 4096, 256, 16):
        while True:
            try:
                client.set(f"filler:{n}", b"x" * size)
            except redis.exceptions.OutOfMemoryError:
                break
            n += 1
    return n


def test_a_full_store_refuses_a_question_with_a_sentence_and_drops_nothing(vllm_settings: Settings) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = start_redis(
        url, port, STATE / f"redis-full-{port}", STATE / "logs" / f"redis-full-{port}.log", maxmemory_mb=BOUND_MB
    )
    own = vllm_settings.model_copy(update={"redis": RedisSettings(url=url, warm_connections=2)})
    try:
        with (
            ServerThread(create_app(own)) as running,
            closing(signed_in_teacher(own, running.url)) as teacher,
            closing(redis.Redis.from_url(url)) as direct,
            httpx.Client(base_url=running.url, headers=operator_headers(own), timeout=30) as operator,
        ):
            classroom = create_classroom(teacher)
            add_passage(teacher, classroom["id"], passage_text(100))
            with closing(joined_pupil(running.url, classroom["join_code"], "Ada")) as ada:
                assert ask_json(ada, classroom["id"], "Who is in the story?").status_code == 200
                before = stored_questions(teacher, classroom["id"])
                keys_before = set(direct.scan_iter(count=1000))

                assert fill(direct) > 0
                # Redis's cron shrinks idle clients' buffers, which can leave a few kB under the bound right after
                # the fill (CI saw the next question stored): a bound 1 MB under what is now used stays full.
                tight = int(direct.info("memory")["used_memory"]) - 2**20
                direct.config_set("maxmemory", tight)
                refused = ask_json(ada, classroom["id"], "And then?")
                assert refused.status_code == 507, refused.text
                assert error_of(refused)["code"] == "store_full"
                assert "Nothing saved before is lost" in error_of(refused)["message"]
                # Nothing dropped (noeviction), nothing half-taken: the class reads as it did.
                assert stored_questions(teacher, classroom["id"]) == before
                store = operator.get("/api/operator/status").json()["store"]
                assert store["max_bytes"] == tight and store["policy"] == "noeviction"
                assert store["evicted_keys"] == 0 and store["used_bytes"] > 0.9 * store["max_bytes"]

                filler = list(direct.scan_iter("filler:*", count=1000))
                direct.delete(*filler)
                direct.config_set("maxmemory", BOUND_MB * 2**20)
                # Every key of before is there (the service's own may have added one since: a probe's, a tally's).
                assert keys_before <= set(direct.scan_iter(count=1000))
                again = ask_json(ada, classroom["id"], "And then?")
                assert again.status_code == 200, again.text
                assert len(stored_questions(teacher, classroom["id"])) == len(before) + 1
    finally:
        server.stop()
