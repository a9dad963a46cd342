"""One pupil question, from arrival to stored answer, with no back-and-forth.

`Answering.ask` checks the question against the class as this process holds it (`ClassCache`), admits and
stores it in one atomic step in Redis before any model call (so nothing is lost; `Store.admit_question`),
and opens the stream on the replica the fleet plans for this passage before the HTTP response starts, so
a dead backend is still a plain 503 (the next replica is tried first). The answer is then written by a task
of this process, `AnswerStream.run` (`service.classroom.answer_stream`), to its end whatever the pupil's
connection does (`service.classroom.live`): it turns vLLM's raw stream into the answer's text, which the
pupil's connections follow, and on every way out stores the result and records the metrics.
`Answering.follow` and `Answering.stop` find a pupil's answer again, in this process or through its record.
"""

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import AsyncGenerator, Mapping
from typing import NoReturn

import anyio

from service.backends.fleet import Fleet
from service.backends.replica_http import OpenStream, ReplicaAnswered, ReplicaHttp, ReplicaNotAnswering, ReplicaRefused
from service.backends.turns import Turns
from service.classroom.accounts import Accounts
from service.classroom.answer_stream import AnswerStream, NotStarted, Waiting
from service.classroom.class_cache import ClassCache
from service.classroom.live import INTERRUPTED, Followed, LiveAnswer, LiveAnswers, follow, follow_stored
from service.classroom.prompting import Prompts
from service.errors import (
    AnswerFinished,
    AnswerInProgress,
    BackendFailed,
    BackendUnavailable,
    ClassArchived,
    ClassClosed,
    LineFull,
    NoActivePassage,
    PassageGone,
    QuestionNotFound,
    SessionExpired,
    TooManyQuestions,
    WrongClassroom,
)
from service.records import STOPPED, Passage, QuestionRecord, QuestionStatus, utcnow
from service.store import RateLimit, Store, TurnLine
from service.store.ids import new_id
from service.telemetry.prometheus import Metrics

log = logging.getLogger(__name__)

NOT_STARTED = "The answer could not be started. Please ask again."
# A class changed this often while one question was being admitted: give up rather than loop.
ADMISSION_ATTEMPTS = 5


class Answering:
    def __init__(
        self,
        store: Store,
        prompts: Prompts,
        classes: ClassCache,
        accounts: Accounts,
        fleet: Fleet,
        replica_http: ReplicaHttp,
        metrics: Metrics,
        turns: Turns,
        *,
        model: str,
        sampling: Mapping[str, float | int],
        rate: RateLimit,
        longest_answer_s: int,
        lease_s: int,
        answers: LiveAnswers,
        progress_s: float,
        stop_wait_s: float,
    ) -> None:
        self._store = store
        self._prompts = prompts
        self._classes = classes
        self._accounts = accounts
        self._fleet = fleet
        self._replica_http = replica_http
        self._metrics = metrics
        self._turns = turns
        self._model = model
        self._sampling = sampling
        self._rate = rate
        self._longest_answer_s = longest_answer_s
        self._lease_s = lease_s
        self._answers = answers
        self._progress_s = progress_s
        self._stop_wait_s = stop_wait_s

    async def ask(
        self, session_token: str | None, classroom_id: str, question: str, passage_id: str | None = None
    ) -> LiveAnswer:
        """Admit a question about `passage_id` (the passage the pupil was reading; None: the active one) and
        start its answer, which then runs to its end in this process whatever the pupil's connection does; the
        pupil follows it (`follow`)."""
        started = time.perf_counter()
        pupil = await self._accounts.asking_pupil(session_token)
        if pupil.classroom_id != classroom_id:
            raise WrongClassroom()
        for attempt in range(ADMISSION_ATTEMPTS):
            version, passage, system_message = await self._open_class(classroom_id, passage_id, stale=attempt > 0)
            if attempt == 0:
                self._prompts.check_question(question)
            variant, replicas = self._fleet.plan(pupil.pupil_id, passage.id)
            record = QuestionRecord(
                id=new_id(),
                classroom_id=classroom_id,
                passage_id=passage.id,
                pupil_id=pupil.pupil_id,
                pupil=pupil.name,
                pupil_number=pupil.pupil_number,
                question=question,
                variant=variant,
                replica=replicas[0] if replicas else None,
            )
            # The turn is taken on the replica planned first, and kept should the question go to the next.
            line = self._turns.line(replicas[0]) if replicas and self._turns.enabled else None
            if line:
                self._turns.expect(record.id)
            admission = await self._store.admit_question(
                session_token or "", record, version, self._rate, self._lease_s, line
            )
            if admission.outcome != "queued":
                self._turns.forget(record.id)
            if admission.outcome != "stale":  # else a teacher changed the class: ask about what it is now
                break
        else:
            raise RuntimeError(f"class {classroom_id} changed {ADMISSION_ATTEMPTS} times while a question waited")
        if admission.outcome == "no_session":
            self._accounts.forget_pupil(session_token or "")
            raise SessionExpired(pupil=True)
        if admission.outcome == "busy":
            raise AnswerInProgress()
        if admission.outcome == "limited":
            raise TooManyQuestions(self._rate.most, max(1, math.ceil(admission.retry_after_s)))
        if admission.outcome == "full":
            await self._refuse(record)
        body = self._prompts.request_body(system_message, question, model=self._model, sampling=self._sampling)
        if admission.outcome == "queued":
            assert line is not None
            places = self._turns.wait(line, classroom_id, record.id, admission.place)
            waiting = Waiting(places, functools.partial(self._start, body=body, replicas=replicas, line=line))
            return self._answer(record, waiting, started, line)
        try:
            record, upstream = await self._start(record, body=body, replicas=replicas, line=line)
        except NotStarted as exc:
            raise exc.failure from None  # stored as failed already
        except BaseException as exc:  # cancelled (the service shuts down before the answer began), or a bug
            with anyio.CancelScope(shield=True):
                message = INTERRUPTED if isinstance(exc, asyncio.CancelledError) else NOT_STARTED
                await self._fail(record, message, line)
            raise
        return self._answer(record, upstream, started, line)

    def _answer(
        self, record: QuestionRecord, upstream: OpenStream | Waiting, started: float, line: TurnLine | None
    ) -> LiveAnswer:
        stream = AnswerStream(
            LiveAnswer(record), upstream, self._store, self._metrics, started, line, self._answers, self._progress_s
        )
        return stream.start()

    async def answer(
        self, session_token: str | None, classroom_id: str, question: str, passage_id: str | None = None
    ) -> QuestionRecord:
        """The whole answer, for clients that want one JSON body."""
        end = await (await self.ask(session_token, classroom_id, question, passage_id)).ended()
        if end.message is not None:
            raise BackendFailed(end.message)
        return end.record

    async def find(self, pupil_id: str, question_id: str) -> LiveAnswer | QuestionRecord:
        """One of the pupil's own questions: its answer as this process writes it, else its stored record."""
        live = self._answers.get(question_id)
        if live is not None and live.record.pupil_id == pupil_id:
            return live
        record = await self._store.get_question(question_id)
        if record is None or record.pupil_id != pupil_id:
            raise QuestionNotFound()
        return record

    def follow(self, found: LiveAnswer | QuestionRecord, after: int) -> AsyncGenerator[Followed]:
        """What the answer says after `after` characters, as it comes, then its end: from this process if it
        writes it, else from its record (another process stores its text every `answer.progress_s`)."""
        if isinstance(found, LiveAnswer):
            return follow(found, after)
        return follow_stored(self._store, found, after, self._progress_s / 2)

    async def stop(self, pupil_id: str, question_id: str) -> None:
        """End the pupil's answer now, on whichever process writes it, and wait (`answer.stop_wait_s` at most)
        until it is stored as stopped."""
        found = await self.find(pupil_id, question_id)
        if isinstance(found, LiveAnswer):
            if not found.cut(STOPPED) and found.cut_reason is None:
                raise AnswerFinished()  # it has ended, or is storing the end it came to
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(found.ended(), self._stop_wait_s)
            return
        if found.status != QuestionStatus.ANSWERING:
            raise AnswerFinished()
        await self._store.request_stop(question_id, self._longest_answer_s)
        deadline = time.monotonic() + self._stop_wait_s
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            record = await self._store.get_question(question_id)
            if record is None or record.status != QuestionStatus.ANSWERING:
                return

    async def _open_class(self, classroom_id: str, passage_id: str | None, *, stale: bool) -> tuple[int, Passage, str]:
        """The class a question is asked in, open and with a passage: its version, the passage asked about (the
        pupil's, else the active one) and its system message. What this process holds is enough to admit a
        question (the admission checks the version) but not to refuse one: it is read again first."""
        cached = await (self._classes.reload(classroom_id) if stale else self._classes.get(classroom_id))
        closed = not cached.classroom.is_open or cached.classroom.archived_at is not None
        if not stale and (
            closed or cached.system_message is None or (passage_id is not None and passage_id not in cached.passage_ids)
        ):
            cached = await self._classes.reload(classroom_id)
        if cached.classroom.archived_at is not None:
            raise ClassArchived()
        if not cached.classroom.is_open:
            raise ClassClosed()
        if cached.passage is None or cached.system_message is None:
            raise NoActivePassage()
        found = await self._classes.passage(cached, passage_id or cached.passage.id)
        if found is None:
            raise PassageGone()
        passage, system_message = found
        return cached.version, passage, system_message

    async def _start(
        self, record: QuestionRecord, *, body: bytes, replicas: list[str], line: TurnLine | None
    ) -> tuple[QuestionRecord, OpenStream]:
        """The first replica of `replicas` that takes the question, and its response once the headers are in;
        else the record is stored failed (`NotStarted`)."""
        failure: BackendFailed | BackendUnavailable = BackendUnavailable()
        tried: str | None = None
        for url in replicas:
            try:
                upstream = await self._replica_http.open_answer(
                    url, body, self._fleet.headers(record.passage_id, record.classroom_id)
                )
            except ReplicaNotAnswering as exc:
                # Its health is the prober's call, not one question's (this process may have been late to see
                # the connection): try the next replica.
                log.warning("replica %s did not answer a question (%s); trying the next", url, exc)
                continue
            except ReplicaRefused as exc:  # nothing listens there
                self._fleet.mark_down(url, str(exc))
                continue
            except ReplicaAnswered as exc:
                # vLLM's own words are for operators (the log), not for the pupil who sees the record.
                log.warning("replica %s refused a question of class %s: %s", url, record.classroom_id, exc.message)
                failure, tried = BackendFailed("The answering service refused the question. Please try again."), url
                break
            return record.model_copy(update={"replica": url}), upstream
        failed = await self._fail(record.model_copy(update={"replica": tried}), failure.message, line)
        raise NotStarted(failed, failure)

    async def _fail(self, record: QuestionRecord, message: str, line: TurnLine | None) -> QuestionRecord:
        failed = record.model_copy(update={"status": QuestionStatus.FAILED, "error": message, "finished_at": utcnow()})
        await self._store.finish_question(failed, line)
        self._metrics.observe(failed)
        return failed

    async def _refuse(self, record: QuestionRecord) -> NoReturn:
        """The line was full: the question is stored refused, and the pupil told when to ask again."""
        error = LineFull(self._turns.retry_after_s)
        refused = record.model_copy(
            update={"status": QuestionStatus.REFUSED, "error": error.message, "finished_at": utcnow()}
        )
        await self._store.refuse_question(refused)
        self._metrics.observe(refused)
        raise error
