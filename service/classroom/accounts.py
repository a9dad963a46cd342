"""Who may do what: teachers' accounts and sign-in, pupils joining a class with its code."""

import functools
from datetime import timedelta

import anyio.to_thread
from argon2 import PasswordHasher
from argon2.exceptions import VerificationError

from service.errors import (
    ClassArchived,
    ClassClosed,
    InvalidInput,
    NotJoined,
    NotSignedIn,
    SessionExpired,
    SignInFailed,
    TooManyFailedAttempts,
    WrongJoinCode,
)
from service.records import Classroom, PupilSession, Teacher
from service.settings import AuthSettings, Settings
from service.store import Store, open_store
from service.store.ids import new_id

MIN_PASSWORD_CHARS = 10
# Pupils' sessions a process remembers for their questions (a school's worth; the oldest seen go first).
REMEMBERED_PUPILS = 20_000
_hasher = PasswordHasher()


@functools.cache
def _unknown_email_hash() -> str:
    """A hash to verify against when the email is unknown, so a wrong email costs as long as a wrong password:
    made at the first sign-in that needs it (in a worker thread), not at import."""
    return _hasher.hash("not a password of anyone")


def _verify(password_hash: str | None, password: str) -> None:
    _hasher.verify(password_hash if password_hash is not None else _unknown_email_hash(), password)


class Accounts:
    def __init__(self, store: Store, auth: AuthSettings) -> None:
        self._store = store
        self._teacher_lifetime = timedelta(hours=auth.teacher_session_hours)
        self._pupil_lifetime = timedelta(hours=auth.pupil_session_hours)
        self._most_failures = auth.failed_attempts_per_client
        self._failure_window_s = auth.failed_attempts_window_s
        self._asking: dict[str, PupilSession] = {}

    async def add_teacher(self, email: str, name: str, password: str) -> Teacher:
        email = email.strip().lower()
        if "@" not in email:
            raise InvalidInput(f"'{email}' is not an email address.")
        if len(password) < MIN_PASSWORD_CHARS:
            raise InvalidInput(f"A password needs at least {MIN_PASSWORD_CHARS} characters.")
        password_hash = await anyio.to_thread.run_sync(_hasher.hash, password)
        teacher = Teacher(id=new_id(), email=email, name=name.strip() or email, password_hash=password_hash)
        if not await self._store.add_teacher(teacher):
            raise InvalidInput(f"There is already a teacher with the email {email}.")
        return teacher

    async def _check_attempts(self, kind: str, client: str, what: str) -> None:
        failures, retry_after_s = await self._store.failed_attempts(kind, client)
        if failures >= self._most_failures:
            raise TooManyFailedAttempts(what, retry_after_s)

    async def sign_in(self, email: str, password: str, client: str) -> tuple[str, Teacher]:
        await self._check_attempts("sign_in", client, "wrong passwords")
        teacher = await self._store.teacher_by_email(email.strip().lower())
        try:
            # Argon2 takes tens of milliseconds on purpose: off the event loop.
            await anyio.to_thread.run_sync(_verify, teacher.password_hash if teacher else None, password)
            if teacher is None:
                raise SignInFailed()
        except (VerificationError, SignInFailed) as exc:
            await self._store.add_failed_attempt("sign_in", client, self._failure_window_s)
            raise SignInFailed() from exc
        return await self._store.start_teacher_session(teacher.id, self._teacher_lifetime), teacher

    async def teacher(self, token: str | None) -> Teacher:
        if not token:
            raise NotSignedIn()
        teacher = await self._store.teacher_of_session(token)
        if teacher is None:
            raise SessionExpired(pupil=False)
        return teacher

    async def join(self, code: str, name: str, client: str) -> tuple[str, PupilSession, Classroom]:
        """`client`: who is trying (its address): wrong codes are counted per client, so that guessing codes
        is stopped whatever names a script gives."""
        await self._check_attempts("join", client, "wrong class codes")
        classroom = await self._store.classroom_by_join_code(code)
        if classroom is None:
            await self._store.add_failed_attempt("join", client, self._failure_window_s)
            raise WrongJoinCode(code.strip())
        if classroom.archived_at is not None:
            raise ClassArchived()
        if not classroom.is_open:
            raise ClassClosed()
        session = PupilSession(pupil_id=new_id(), classroom_id=classroom.id, name=name)
        token, session = await self._store.join_pupil(session, self._pupil_lifetime)
        return token, session, classroom

    async def pupil(self, token: str | None) -> PupilSession:
        if not token:
            raise NotJoined()
        session = await self._store.pupil_of_session(token)
        if session is None:
            raise SessionExpired(pupil=True)
        return session

    async def asking_pupil(self, token: str | None) -> PupilSession:
        """The pupil behind a question. A session never changes while it lasts, so this process keeps those it
        has read; that it still lasts is checked where the question is admitted (`Store.admit_question`), in
        the same round trip to Redis that stores the question."""
        session = self._asking.get(token) if token else None
        if session is None:
            session = await self.pupil(token)
            if len(self._asking) >= REMEMBERED_PUPILS:
                del self._asking[next(iter(self._asking))]
            self._asking[token or ""] = session
        return session

    def forget_pupil(self, token: str) -> None:
        """The session ended (the pupil left, or it expired): ask Redis again next time."""
        self._asking.pop(token, None)


async def add_teacher(settings: Settings, email: str, name: str, password: str) -> Teacher:
    """For the command line: one connection to Redis, one account."""
    async with open_store(settings.redis.url) as store:
        return await Accounts(store, settings.auth).add_teacher(email, name, password)
