"""Every channel a service process listens to, on one Redis connection, fanned out in memory.

Open teacher pages (a class's questions as they come) and the process's own listeners (class changes, Stops,
turns) each iterate `Subscriptions.messages(channel)`. The first subscriber of a channel subscribes the
process's one pub/sub connection to it and the last to leave unsubscribes it, so a process holds one
connection however many pages are open, and the pool is left to questions.

Each subscriber has a bounded queue of its own. One that falls behind (a page whose client stopped reading)
is dropped, its iterator raising `TooSlow`, rather than let its queue grow or hold up the others; a page's
EventSource then connects again. Should the connection be lost for longer than the client's retries, every
subscriber's iterator raises the error, as a connection of its own would have, and the next subscription
opens a new connection.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

# Messages a subscriber may be behind before it is dropped: a class's burst is 30 questions, each announced
# when asked and when answered.
QUEUE_SIZE = 256


class TooSlow(Exception):
    """The subscriber fell `QUEUE_SIZE` messages behind and was dropped."""

    def __init__(self, channel: str) -> None:
        super().__init__(f"fell {QUEUE_SIZE} messages behind on {channel}: dropped")


class ChannelLost(RedisError):
    """The process's pub/sub connection was lost (past the client's retries); a new subscription opens another."""

    def __init__(self, channel: str) -> None:
        super().__init__(f"lost the connection that listened to {channel}")


class _Subscriber:
    __slots__ = ("queue",)

    def __init__(self) -> None:
        # One place more than QUEUE_SIZE: the last is for the news that it was dropped.
        self.queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue(QUEUE_SIZE + 1)


class Subscriptions:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._channels: dict[str, set[_Subscriber]] = {}
        # SUBSCRIBE and UNSUBSCRIBE one at a time, so a channel's last subscriber leaving and a new one arriving
        # never leave the connection unsubscribed from a channel that has a subscriber.
        self._commands = asyncio.Lock()
        self._unsubscribing: set[asyncio.Task[None]] = set()

    @property
    def channels(self) -> int:
        """Channels with at least one subscriber in this process."""
        return len(self._channels)

    @property
    def subscribers(self) -> int:
        return sum(len(s) for s in self._channels.values())

    async def messages(self, channel: str) -> AsyncGenerator[bytes]:
        """What is published on `channel` from now on, until the consumer stops; raises `TooSlow`, or `ChannelLost`."""
        me = _Subscriber()
        await self._join(channel, me)
        try:
            while True:
                item = await me.queue.get()
                if isinstance(item, TooSlow):
                    raise item
                if isinstance(item, BaseException):  # one error for all: each subscriber raises its own
                    raise ChannelLost(channel) from item
                yield item
        finally:
            self._leave(channel, me)

    async def close(self) -> None:
        """At shutdown: the reader stopped and the connection closed; subscribers still there see the end."""
        tasks = [t for t in [self._reader, *self._unsubscribing] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._reader = self._pubsub = None
        self._fail_all(ConnectionError("the service is stopping"))

    async def _join(self, channel: str, me: _Subscriber) -> None:
        async with self._commands:
            subscribers = self._channels.get(channel)
            if subscribers is not None:
                subscribers.add(me)
                return
            # In before SUBSCRIBE is sent, so that no message after its confirmation finds nobody.
            self._channels[channel] = {me}
            try:
                if self._pubsub is None:
                    self._pubsub = self._redis.pubsub()
                await self._pubsub.subscribe(channel)
            except BaseException:
                self._channels.pop(channel, None)
                raise
            if self._reader is None or self._reader.done():
                self._reader = asyncio.create_task(self._read(self._pubsub))

    def _leave(self, channel: str, me: _Subscriber) -> None:
        subscribers = self._channels.get(channel)
        if subscribers is None:
            return
        subscribers.discard(me)
        if not subscribers:
            del self._channels[channel]
            task = asyncio.get_running_loop().create_task(self._unsubscribe(channel))
            self._unsubscribing.add(task)
            task.add_done_callback(self._unsubscribing.discard)

    async def _unsubscribe(self, channel: str) -> None:
        async with self._commands:
            if channel in self._channels or self._pubsub is None:  # a subscriber came back meanwhile
                return
            try:
                await self._pubsub.unsubscribe(channel)
            except RedisError as exc:  # the reader meets the same error and fails everyone
                log.debug("unsubscribing from %s failed: %s", channel, exc)

    async def _read(self, pubsub: PubSub) -> None:
        try:
            while True:
                # Blocks until something comes, subscribed or not: a later SUBSCRIBE's messages come here too.
                message = await pubsub.get_message(timeout=None)
                if message is None or message["type"] != "message":
                    continue
                channel = message["channel"].decode()
                for subscriber in list(self._channels.get(channel, ())):
                    self._deliver(channel, subscriber, message["data"])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the connection is gone past the client's retries
            log.warning("lost the pub/sub connection (%s): its %d subscribers told", exc, self.subscribers)
            if self._pubsub is pubsub:
                self._pubsub = None
            self._fail_all(exc)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    def _deliver(self, channel: str, subscriber: _Subscriber, data: bytes) -> None:
        if subscriber.queue.qsize() < QUEUE_SIZE:
            subscriber.queue.put_nowait(data)
            return
        log.warning("a subscriber of %s fell %d messages behind: dropped", channel, QUEUE_SIZE)
        subscriber.queue.put_nowait(TooSlow(channel))
        self._leave(channel, subscriber)

    def _fail_all(self, error: BaseException) -> None:
        channels, self._channels = self._channels, {}
        for subscribers in channels.values():
            for subscriber in subscribers:
                if subscriber.queue.full():
                    subscriber.queue.get_nowait()  # the error must get in: it ends the subscriber anyway
                subscriber.queue.put_nowait(error)
