"""One pub/sub connection a process, fanned out to its subscribers (`service.store.subscriptions`), on a real
Redis: what each subscriber gets, what one that falls behind costs the others, and a Redis that dies."""

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from redis.asyncio import Redis

from service.local.processes import free_port
from service.local.redis_server import start_redis
from service.store import connect
from service.store.ids import new_id
from service.store.subscriptions import QUEUE_SIZE, ChannelLost, Subscriptions, TooSlow
from tests.servers import STATE


async def numsub(redis: Redis, channel: str) -> int:
    """How many connections (not subscribers) listen to `channel`."""
    return int(dict(await redis.pubsub_numsub(channel))[channel.encode()])


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 10.0) -> None:
    """Wait until `check` holds; `what` names it should it not."""
    try:
        async with asyncio.timeout(timeout_s):
            while not await check():  # noqa: ASYNC110  # Redis's state, polled: nothing to wait on
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"not {what} within {timeout_s} s") from None


async def take(messages: AsyncIterator[bytes], n: int) -> list[bytes]:
    return [await anext(messages) for _ in range(n)]


async def next_of(messages: AsyncIterator[bytes]) -> bytes:
    """The next message (a coroutine, for a task)."""
    return await anext(messages)


async def _fan_out(redis_url: str) -> None:
    redis = connect(redis_url)
    hub = Subscriptions(redis)
    lesson, other = f"test:{new_id()}", f"test:{new_id()}"
    try:
        pages = [hub.messages(lesson) for _ in range(200)]
        listener = hub.messages(other)
        # Each subscription is made when its iterator is first awaited.
        firsts = [asyncio.create_task(next_of(p)) for p in [*pages, listener]]
        await until(lambda: numsub_is(redis, lesson, 1), "subscribed")
        await until(lambda: numsub_is(redis, other, 1), "subscribed")
        assert (hub.channels, hub.subscribers) == (2, 201)
        await redis.publish(lesson, "asked")
        await redis.publish(other, "changed")
        got = await asyncio.gather(*firsts)
        assert got == [b"asked"] * 200 + [b"changed"]
        await redis.publish(lesson, "answered")
        assert [await anext(p) for p in pages] == [b"answered"] * 200

        # The last page of a channel to leave unsubscribes the connection; the others keep theirs.
        for page in pages[:-1]:
            await page.aclose()
        assert await numsub(redis, lesson) == 1
        await pages[-1].aclose()
        await until(lambda: numsub_is(redis, lesson, 0), "unsubscribed")
        assert await numsub(redis, other) == 1 and hub.subscribers == 1

        # A channel subscribed again after its last subscriber left hears what comes after.
        again = hub.messages(lesson)
        first = asyncio.create_task(next_of(again))
        await until(lambda: numsub_is(redis, lesson, 1), "subscribed again")
        await redis.publish(lesson, "back")
        assert await first == b"back"
        await again.aclose()
        await listener.aclose()
    finally:
        await hub.close()
        await redis.aclose()


async def numsub_is(redis: Redis, channel: str, n: int) -> bool:
    return await numsub(redis, channel) == n


def test_one_connection_carries_every_subscriber_of_every_channel(redis_url: str) -> None:
    asyncio.run(_fan_out(redis_url))


async def _slow_one_dropped(redis_url: str) -> None:
    redis = connect(redis_url)
    hub = Subscriptions(redis)
    channel = f"test:{new_id()}"
    try:
        fast, slow = hub.messages(channel), hub.messages(channel)
        firsts = [asyncio.create_task(next_of(fast)), asyncio.create_task(next_of(slow))]
        await until(lambda: numsub_is(redis, channel, 1), "subscribed")
        await redis.publish(channel, "0")
        assert await asyncio.gather(*firsts) == [b"0", b"0"]
        # `slow` reads nothing more while more than its queue holds is published; `fast` reads as it comes.
        sent = [str(i).encode() for i in range(1, QUEUE_SIZE + 20)]
        reader = asyncio.create_task(take(fast, len(sent)))
        for data in sent:
            await redis.publish(channel, data)
        assert await reader == sent
        assert hub.subscribers == 1  # the slow one was dropped, the channel kept for the other
        assert await take(slow, QUEUE_SIZE) == sent[:QUEUE_SIZE]  # what it was owed, then the news
        with pytest.raises(TooSlow):
            await anext(slow)
        await redis.publish(channel, "after")
        assert await anext(fast) == b"after"
        await fast.aclose()
    finally:
        await hub.close()
        await redis.aclose()


def test_a_subscriber_that_falls_behind_is_dropped_and_the_others_go_on(redis_url: str) -> None:
    asyncio.run(_slow_one_dropped(redis_url))


async def _redis_dies(url: str, restart: Callable[[], None], kill: Callable[[], None]) -> None:
    redis = connect(url)
    hub = Subscriptions(redis)
    channel = f"test:{new_id()}"
    try:
        page = hub.messages(channel)
        first = asyncio.create_task(next_of(page))
        await until(lambda: numsub_is(redis, channel, 1), "subscribed")
        kill()
        # The client retries for about 5 s, then every subscriber hears that the connection is lost.
        with pytest.raises(ChannelLost):
            async with asyncio.timeout(30):
                await first
        assert hub.subscribers == 0
        restart()
        again = hub.messages(channel)  # a new subscription opens a new connection
        second = asyncio.create_task(next_of(again))
        await until(lambda: numsub_is(redis, channel, 1), "subscribed on the new connection", 30)
        await redis.publish(channel, "back")
        assert await second == b"back"
        await again.aclose()
    finally:
        await hub.close()
        await redis.aclose()


@pytest.mark.slow  # a Redis of its own, killed and started again
def test_when_redis_is_killed_every_subscriber_hears_it_and_a_new_subscription_works() -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    data_dir, log = STATE / f"redis-subscriptions-{port}", STATE / "logs" / f"redis-subscriptions-{port}.log"
    process = start_redis(url, port, data_dir, log)

    def kill() -> None:
        assert process.popen is not None
        os.killpg(process.pid, signal.SIGKILL)
        process.popen.wait(10)

    def restart() -> None:
        nonlocal process
        process = start_redis(url, port, data_dir, log)

    try:
        asyncio.run(_redis_dies(url, restart, kill))
    finally:
        process.stop()
