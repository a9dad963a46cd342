"""Questions past the school's retention, on a real Redis and a real folder: archived whole to files, then
taken out of the store with every index, never doubled should a removal fail, and downloadable by the
teacher (`archive.csv`) while the class's list keeps the rest; a deleted class's archive goes with it."""

import asyncio
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from service.app import create_app
from service.classroom.archive import QuestionArchive
from service.classroom.retention import Retention
from service.records import Passage, QuestionRecord, QuestionStatus, Usage
from service.settings import SchoolSettings, Settings
from service.store import Keys, Store, open_store
from service.store.ids import new_id
from tests.helpers import add_passage, create_classroom, exported_rows, signed_in_teacher
from tests.servers import ServerThread, isolated, own_database_url


def record(classroom_id: str, passage_id: str, days_ago: float, n: int, status: QuestionStatus) -> QuestionRecord:
    return QuestionRecord(
        id=new_id(), classroom_id=classroom_id, passage_id=passage_id, pupil_id=f"pupil-{n % 3}",
        pupil=f"Pupil {n % 3}", question=f"Question {n}?", status=status, answer=f"Answer {n}.",
        usage=Usage(prompt_tokens=400, cached_tokens=384, completion_tokens=40), ttft_ms=420.0, total_ms=2100.0,
        asked_at=datetime.now(UTC) - timedelta(days=days_ago, seconds=-n),
    )  # fmt: skip


Ages = list[tuple[float, QuestionStatus]]  # days ago, and how each question stands


async def seeded(store: Store, classroom_id: str, passage_id: str, ages: Ages) -> list[QuestionRecord]:
    records = [record(classroom_id, passage_id, days, n, status) for n, (days, status) in enumerate(ages)]
    for r in records:
        await store.refuse_question(r)  # stored and indexed as it is
    return records


ANSWERED, ANSWERING = QuestionStatus.ANSWERED, QuestionStatus.ANSWERING


async def _retention(redis_url: str, folder: Path) -> None:
    async with open_store(own_database_url(redis_url)) as store:
        classroom = await store.create_classroom("teacher", "4B")
        passage = Passage(id=new_id(), classroom_id=classroom.id, title="t", text="x", tokens=2)
        await store.add_passage(passage, publish=True)
        old = [(400.0, ANSWERED)] * 5
        records = await seeded(store, classroom.id, passage.id, [*old, (400.0, ANSWERING), *[(10.0, ANSWERED)] * 3])
        past, writing, kept = records[:5], records[5], records[6:]
        archive = QuestionArchive(folder)
        retention = Retention(store, archive, retention_days=365, every_s=3600, batch=2)

        # A round whose removal failed after its file was written: the next archives the same, once.
        await asyncio.to_thread(archive.write, classroom.id, past[:2])
        assert await retention.sweep() == 5
        assert await retention.sweep() == 0
        files = archive.files(classroom.id)
        assert len(files) == 3  # batches of 2, 2 and 1; the failed round's file replaced, not doubled
        pages = [page async for page in archive.pages(classroom.id, 1)]  # a file's batch of 2 in two pages
        assert [len(page) for page in pages] == [1] * 5
        archived = [r for page in pages for r in page]
        assert [r.id for r in archived] == [r.id for r in past][::-1]  # newest first, each once
        assert archived[::-1] == past  # whole, as stored

        # Out of the store with every index; the recent ones and the one still being written stay.
        assert not any([await store.redis.exists(Keys.question(r.id)) for r in past])
        left = {r.id for r in await store.list_questions(classroom.id, limit=100)}
        assert left == {writing.id, *(r.id for r in kept)}
        for r in past:
            for index in (
                Keys.questions_by_name(classroom.id, r.pupil),
                Keys.passage_questions(passage.id),
                Keys.pupil_questions(r.pupil_id),
            ):
                assert await store.redis.zscore(index, r.id) is None, index

        # The sweep is one process's a round: the others leave it.
        assert await store.claim_retention_sweep(60)
        assert not await store.claim_retention_sweep(60)


def test_questions_past_retention_are_archived_whole_once_and_taken_out_of_the_store(
    redis_url: str, tmp_path: Path
) -> None:
    asyncio.run(_retention(redis_url, tmp_path))


def test_the_teacher_downloads_the_archived_questions_and_a_deleted_class_takes_them_along(
    settings: Settings, tmp_path: Path
) -> None:
    own = isolated(settings, school=SchoolSettings(archive_dir=tmp_path, retention_days=30))
    with ServerThread(create_app(own)) as running, closing(signed_in_teacher(own, running.url)) as teacher:
        classroom = create_classroom(teacher)
        passage = add_passage(teacher, classroom["id"], "Bees dance to tell the hive where flowers are.")

        async def archive_old() -> int:
            async with open_store(own.redis.url) as store:
                ages = [(40.0, ANSWERED)] * 4 + [(1.0, ANSWERED)] * 2
                await seeded(store, classroom["id"], passage["id"], ages)
                return await Retention(store, QuestionArchive(tmp_path), retention_days=30, every_s=3600).sweep()

        assert asyncio.run(archive_old()) == 4
        archived = exported_rows(teacher, classroom["id"], "archive.csv")
        listed = exported_rows(teacher, classroom["id"])
        assert [r["Question"] for r in archived] == [f"Question {n}?" for n in (3, 2, 1, 0)]
        assert [r["Question"] for r in listed] == ["Question 5?", "Question 4?"]
        assert {r["Passage"] for r in archived} == {passage["title"]}
        assert (tmp_path / classroom["id"]).is_dir()
        assert teacher.delete(f"/api/classrooms/{classroom['id']}").status_code == 204
        assert not (tmp_path / classroom["id"]).exists()
