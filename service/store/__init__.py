"""All the service's state, in Redis, read and written through one `Store`. Each module keeps one kind of thing:

    keys.py            every key's name, and the list of them all (no other module spells a key)
    scripts.py         the Lua scripts that make a step atomic
    ids.py             ids, tokens and join codes
    connection.py      the Redis client: `connect`, `open_connections`
    subscriptions.py   every channel the process listens to, on one connection, fanned out to its subscribers
    teachers.py        teachers, their sessions, failed attempts to sign in or join
    pupils.py          pupils' sessions and the names they joined a class with
    classes.py         classrooms, the version every write to a class bumps, a class's deletion
    passages.py        passages, and the one a class asks about
    questions.py       questions: admission, turns, progress, stops, their end, the lists that read them
    stats.py           the operators' figures: tallies each question's final record adds to, read back for a window
    backend_config.py  the backends' shared configuration and the warm-up's marks
    usage.py           Redis' memory: how much the state takes, and its bound
    archiving.py       questions past retention, read and taken out once archived

A service process opens one client for its life (`service/services.py`); a command or a script opens a store
for a moment with `open_store`.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from service.store.archiving import ArchiveStore
from service.store.backend_config import BackendStore
from service.store.classes import DELETE_BATCH, DELETED_VERSION_S, ClassState, ClassStore
from service.store.connection import POOL_WAIT_S, connect, open_connections
from service.store.ids import (
    JOIN_CODE_ALPHABET,
    JOIN_CODE_LENGTH,
    new_id,
    new_join_code,
    new_token,
    normalize_join_code,
)
from service.store.keys import Keys
from service.store.passages import PassageStore
from service.store.pupils import PupilStore
from service.store.questions import RECENT_S, Admission, QuestionStore, RateLimit, TurnLine
from service.store.stats import StatsStore
from service.store.teachers import AccountStore
from service.store.usage import MemoryUsage, UsageStore

__all__ = [
    "DELETED_VERSION_S",
    "DELETE_BATCH",
    "JOIN_CODE_ALPHABET",
    "JOIN_CODE_LENGTH",
    "POOL_WAIT_S",
    "RECENT_S",
    "Admission",
    "ClassState",
    "Keys",
    "MemoryUsage",
    "RateLimit",
    "Store",
    "TurnLine",
    "connect",
    "new_id",
    "new_join_code",
    "new_token",
    "normalize_join_code",
    "open_connections",
    "open_store",
]


class Store(
    AccountStore,
    ClassStore,
    PassageStore,
    QuestionStore,
    PupilStore,
    StatsStore,
    BackendStore,
    UsageStore,
    ArchiveStore,
):
    """Every read and write of the service's state, over one Redis client (`redis`): the methods of the
    modules listed above, together in one object."""


@asynccontextmanager
async def open_store(redis_url: str) -> AsyncIterator[Store]:
    """For a command or a script: a store on a client of its own, for a moment, closed after."""
    redis = connect(redis_url)
    store = Store(redis)
    try:
        yield store
    finally:
        await store.subscriptions.close()
        await redis.aclose()
