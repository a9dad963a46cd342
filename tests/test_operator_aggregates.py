"""The operator's figures from the tallies written as questions end: the histogram's percentiles within its
precision of the exact ones, each question counted once whichever script stores its end and however often, and
the figures of any window equal to those of the records asked in it (counts and tokens exactly)."""

import asyncio
import random
import time
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from service.classroom import aggregates, figures
from service.classroom.abandoned import ABANDONED
from service.classroom.answer_stream import MIDSTREAM_FAILURE
from service.records import STOPPED, Passage, PupilSession, QuestionRecord, QuestionStatus, Usage
from service.store import Keys, RateLimit, Store, open_store
from service.store.ids import new_id
from service.store.stats import HOUR, KEPT_S, MINUTE, TEN, TTFT_RATIO, Tally, tally_of
from tests.servers import own_database_url

PRECISION = TTFT_RATIO - 1


def close_enough(estimate: float | None, exact: float | None) -> bool:
    if estimate is None or exact is None:
        return estimate is None and exact is None
    return abs(estimate - exact) <= PRECISION * exact * (1 + 1e-9)


def histogram(values: list[float]) -> Tally:
    tally = Tally()
    for value in values:
        tally.add(tally_of(record(ttft_ms=value)))
    return tally


def record(
    status: QuestionStatus = QuestionStatus.ANSWERED, error: str | None = None, **changes: object
) -> QuestionRecord:
    fields: dict[str, object] = {
        "id": new_id(), "classroom_id": "c", "passage_id": "p", "pupil_id": "u", "pupil": "Ada", "question": "Why?",
        "status": status, "error": error,
    }  # fmt: skip
    return QuestionRecord.model_validate({**fields, **changes})


# The pure parts: a question's tally, and percentiles from a histogram


def test_a_final_record_adds_one_question_its_outcome_tokens_and_time_to_first_token() -> None:
    answered = tally_of(record(usage=Usage(prompt_tokens=400, cached_tokens=384, completion_tokens=40), ttft_ms=420))
    assert (answered.questions, answered.answered, answered.errors) == (1, 1, 0)
    assert (answered.prompt_tokens, answered.cached_tokens) == (400, 384)
    [(bucket, count)] = answered.ttft.items()
    assert count == 1 and TTFT_RATIO**bucket <= 420 < TTFT_RATIO ** (bucket + 1)
    # Errors as figures.is_error counts them: ours, not a pupil's Stop.
    outcomes = [
        (QuestionStatus.FAILED, "The answering service cannot be reached."),
        (QuestionStatus.REFUSED, "Many pupils are asking."),
        (QuestionStatus.INCOMPLETE, MIDSTREAM_FAILURE),
        (QuestionStatus.INCOMPLETE, ABANDONED),
        (QuestionStatus.INCOMPLETE, STOPPED),
        (QuestionStatus.FAILED, STOPPED),
    ]
    tallies = [tally_of(record(status, error)) for status, error in outcomes]
    assert [(t.questions, t.answered, t.errors, t.ttft) for t in tallies] == [(1, 0, 1, {})] * 4 + [(1, 0, 0, {})] * 2


def test_a_tally_is_fields_as_the_scripts_keep_it() -> None:
    tally = Tally(3, 2, 0, 1200, 1100, {-4: 1, 250: 2})
    fields = tally.fields("class:c")
    assert fields == {"class:c|q": 3, "class:c|a": 2, "class:c|p": 1200, "class:c|c": 1100, "class:c|-4": 1,
                      "class:c|250": 2}  # fmt: skip
    read = Tally()
    for name, value in fields.items():
        read.take(name.encode().rpartition(b"|")[2], value)
    assert read == tally
    assert Tally().fields("class:c") == {}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0.05, max_value=120_000), min_size=1, max_size=400))
def test_percentiles_from_the_histogram_are_within_a_bucket_of_the_exact_ones(values: list[float]) -> None:
    tally = histogram(values)
    assert sum(tally.ttft.values()) == len(values)
    found = aggregates.histogram_percentiles(tally.ttft, (1, 5, 50, 95, 99))
    assert found is not None
    for pct, estimate in zip((1, 5, 50, 95, 99), found, strict=True):
        assert close_enough(estimate, figures.percentile(values, pct)), (pct, estimate)


def test_percentiles_of_a_realistic_spread_are_well_within_the_bound() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(6, 0.6) for _ in range(5000)]  # median ~400 ms, a long tail
    found = aggregates.figures_of(histogram(values))
    exact = figures.figures([record(ttft_ms=v) for v in values])
    assert found.ttft_p50_ms is not None and exact.ttft_p50_ms is not None
    assert found.ttft_p95_ms is not None and exact.ttft_p95_ms is not None
    assert abs(found.ttft_p50_ms / exact.ttft_p50_ms - 1) < 0.005
    assert abs(found.ttft_p95_ms / exact.ttft_p95_ms - 1) < 0.005
    assert aggregates.histogram_percentiles({}, (50,)) is None


# On the real Redis, through the scripts that store a question's end


async def _admitted(store: Store, classroom_id: str, passage_id: str, asked_at: datetime) -> QuestionRecord:
    pupil = PupilSession(pupil_id=new_id(), classroom_id=classroom_id, name="Ada")
    token = await store.start_pupil_session(pupil, timedelta(hours=1))
    question = record(
        QuestionStatus.ANSWERING, classroom_id=classroom_id, passage_id=passage_id, pupil_id=pupil.pupil_id,
        asked_at=asked_at, variant="original", replica="http://r1/v1",
    )  # fmt: skip
    version = (await store.class_state(classroom_id)).version
    assert (await store.admit_question(token, question, version, RateLimit(most=10), 60)).outcome == "ok"
    return question


async def _counted_once(redis_url: str) -> None:
    async with open_store(own_database_url(redis_url)) as store:
        classroom = await store.create_classroom("teacher", "4B")
        passage = Passage(id=new_id(), classroom_id=classroom.id, title="t", text="x", tokens=2)
        await store.add_passage(passage, publish=True)
        await store.set_active_passage(classroom.id, passage.id)
        now = time.time()
        asked = datetime.fromtimestamp(now - 30, UTC)
        usage = Usage(prompt_tokens=100, cached_tokens=60, completion_tokens=9)

        async def counted() -> Tally:
            window = await store.stats_window(now - 3600, now)
            return window.by_classroom.get(classroom.id, Tally())

        # Being answered: not counted yet. Finished: counted; the same FINISH again (a retried command): not again.
        ada = await _admitted(store, classroom.id, passage.id, asked)
        assert await counted() == Tally()
        done = ada.model_copy(update={"status": QuestionStatus.ANSWERED, "usage": usage, "ttft_ms": 250.0})
        await store.finish_question(done)
        await store.finish_question(done)
        assert await counted() == tally_of(done)
        # The sweeper finds Ben's answer abandoned, but his process finishes it first: the sweep counts nothing.
        ben = await _admitted(store, classroom.id, passage.id, asked)
        [(stored, _)] = [found for found in await store.abandoned_answers(now + 3600) if found[1].id == ben.id]
        failed = ben.model_copy(update={"status": QuestionStatus.FAILED, "error": "The answering service is down."})
        await store.finish_question(failed)
        cut = ben.model_copy(update={"status": QuestionStatus.INCOMPLETE, "error": ABANDONED})
        assert not await store.abandon_answer(stored, cut)
        # Cy's is swept as cut short: counted once, and a FINISH after it (his process after all) adds nothing.
        cy = await _admitted(store, classroom.id, passage.id, asked)
        [(stored, _)] = [found for found in await store.abandoned_answers(now + 3600) if found[1].id == cy.id]
        cut = cy.model_copy(update={"status": QuestionStatus.INCOMPLETE, "error": ABANDONED})
        assert await store.abandon_answer(stored, cut)
        assert not await store.abandon_answer(stored, cut)
        await store.finish_question(cy.model_copy(update={"status": QuestionStatus.ANSWERED}))
        # A refused question counts, once however often it is stored.
        refused = record(
            QuestionStatus.REFUSED, "Many pupils are asking.", classroom_id=classroom.id, passage_id=passage.id,
            asked_at=asked,
        )  # fmt: skip
        await store.refuse_question(refused)
        await store.refuse_question(refused)
        expected = aggregates.total(tally_of(r) for r in (done, failed, cut, refused))
        assert await counted() == expected
        assert expected.questions == 4 and expected.errors == 3
        by_variant = (await store.stats_window(now - 3600, now)).series
        assert sum(t.questions for t in by_variant["original"].values()) == 3
        assert sum(t.questions for t in by_variant["none"].values()) == 1
        # Kept until a day after the hour ends (and a margin), then gone.
        at = int(asked.timestamp())
        hour = at // HOUR * HOUR
        ten, minute = at // TEN * TEN, at // MINUTE * MINUTE
        for key in (Keys.stats(hour), Keys.stats_ten(ten), Keys.stats_minute(minute), Keys.stats_series(hour)):
            assert await store.redis.expiretime(key) == hour + HOUR + KEPT_S


def test_a_question_counts_once_when_its_end_is_stored_whichever_script_stores_it_and_however_often(
    redis_url: str,
) -> None:
    asyncio.run(_counted_once(redis_url))


def _district(start: float, count: int, rng: random.Random, span_s: float = 4 * HOUR) -> list[QuestionRecord]:
    """Questions of 12 classes on 2 variants and 3 replicas (and some that reached none), asked over `span_s`."""
    outcomes = [
        (QuestionStatus.ANSWERED, None),
        (QuestionStatus.ANSWERED, None),
        (QuestionStatus.ANSWERED, None),
        (QuestionStatus.FAILED, "The answering service cannot be reached."),
        (QuestionStatus.REFUSED, "Many pupils are asking."),
        (QuestionStatus.INCOMPLETE, MIDSTREAM_FAILURE),
        (QuestionStatus.INCOMPLETE, STOPPED),
    ]
    records = []
    for _ in range(count):
        status, error = rng.choice(outcomes)
        reached = status != QuestionStatus.REFUSED and rng.random() > 0.05
        prompt = rng.randint(200, 900)
        records.append(
            record(
                status,
                error,
                classroom_id=f"class-{rng.randrange(12)}",
                passage_id="p",
                variant=rng.choice(["original", "fp8"]) if reached else None,
                replica=f"http://replica-{rng.randrange(3)}:8000/v1" if reached else None,
                usage=Usage(prompt_tokens=prompt, cached_tokens=rng.randint(0, prompt), completion_tokens=30)
                if status == QuestionStatus.ANSWERED
                else None,
                ttft_ms=rng.lognormvariate(6, 0.8) if status != QuestionStatus.REFUSED else None,
                asked_at=datetime.fromtimestamp(start + rng.uniform(0, span_s), UTC),
            )  # fmt: skip
        )
    return records


def _assert_same(found: figures.Figures, exact: figures.Figures) -> None:
    counts = ("questions", "answered", "errors", "prompt_tokens", "cached_tokens", "cache_hit_ratio")
    assert found.model_dump(include=set(counts)) == exact.model_dump(include=set(counts))
    assert close_enough(found.ttft_p50_ms, exact.ttft_p50_ms), (found, exact)
    assert close_enough(found.ttft_p95_ms, exact.ttft_p95_ms), (found, exact)


async def _figures_of_windows(redis_url: str) -> None:
    now = time.time()
    start = now // HOUR * HOUR - 5 * HOUR  # four hours asked within the last day (nothing expired), and now
    records = _district(start, 1500, random.Random(3)) + _district(now - 150, 40, random.Random(4), span_s=150)
    async with open_store(own_database_url(redis_url)) as store:
        for question in records:
            await store.refuse_question(question)  # stores any final record as it is, and counts it
        # Partial and whole hours, aligned and not; the first and last minutes count whole (in the service the
        # last ends now: none is asked after it); up to now (None), the hour now is in counts from its totals.
        windows: list[tuple[float, float | None]] = [(start + 1234.5, start + 3 * HOUR + 77), (start + 61, start + 200)]
        windows += [
            (start, start + 4 * HOUR - 1),
            (start + HOUR - 1, start + 2 * HOUR),
            (start - HOUR, start + 5 * HOUR),
        ]
        windows += [(start + 1234.5, None), (now - 100, None), (now // TEN * TEN - 2 * TEN + 30, None)]
        for since, until in windows:
            before = time.time()
            found = aggregates.window_figures(await store.stats_window(since, until))
            first, last = since // MINUTE * MINUTE, (time.time() if until is None else until) // MINUTE * MINUTE
            if until is None:  # the minute now may have turned during the call
                last = next(iter(found.series.values()))[-1].start
                assert before // MINUTE * MINUTE <= last <= time.time()
            asked = [r for r in records if first <= r.asked_at.timestamp() < last + MINUTE]
            _assert_same(found.overall, figures.figures(asked))

            def each(name: object, of: list[QuestionRecord] = asked) -> dict[str, list[QuestionRecord]]:
                groups: dict[str, list[QuestionRecord]] = {}
                for r in of:
                    groups.setdefault(str(getattr(r, str(name)) or "none"), []).append(r)
                return groups

            for name, found_by in (
                ("variant", found.by_variant),
                ("replica", found.by_replica),
                ("classroom_id", found.by_classroom),
            ):
                exact_by = each(name)
                assert sorted(found_by) == sorted(exact_by)
                for key, group in exact_by.items():
                    _assert_same(found_by[key], figures.figures(group))
            minutes = int((last - first) // MINUTE) + 1
            assert sorted(found.series) == sorted(found.by_variant)
            for variant, points in found.series.items():
                assert [p.start for p in points] == [first + i * MINUTE for i in range(minutes)]
                by_minute: dict[float, list[QuestionRecord]] = {}
                for r in each("variant")[variant]:
                    by_minute.setdefault(r.asked_at.timestamp() // MINUTE * MINUTE, []).append(r)
                for point in points:
                    _assert_same(point, figures.figures(by_minute.get(point.start, [])))


def test_the_figures_of_a_window_are_those_of_the_records_asked_in_it(redis_url: str) -> None:
    asyncio.run(_figures_of_windows(redis_url))
