"""The questions' CSV as a teacher opens it: Excel's byte-order mark, the school's clock beside UTC, columns
and figures in words."""

import codecs
import csv
import io
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest
from pydantic import ValidationError

from service.classroom.export import questions_csv
from service.records import Passage, QuestionRecord, QuestionStatus, Usage
from service.settings import SchoolSettings, Settings
from tests.helpers import (
    Join,
    add_passage,
    ask_json,
    ask_then_stop,
    create_classroom,
    eventually,
    passage_text,
    stored_questions,
)

HEADER = [
    "Asked (Europe/London)", "Asked (UTC)", "Pupil", "Passage", "Question", "Answer", "Status",
    "Seconds to first words", "Seconds to whole answer", "Reused from earlier questions (%)",
    "Prompt (tokens)", "Reused (tokens)", "Answer (tokens)",
]  # fmt: skip


def rows_of(response: httpx.Response) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(response.content.decode("utf-8-sig"))))


def test_the_export_opens_in_excel_with_the_schools_times_and_words(
    settings: Settings, teacher: httpx.Client, join: Join
) -> None:
    assert settings.school.time_zone == "Europe/London"  # the default
    classroom = create_classroom(teacher, "Class 5A")
    add_passage(teacher, classroom["id"], passage_text(80), title="Les abeilles")
    zoe = join(classroom["join_code"], "Zoë")
    before = datetime.now(UTC).replace(microsecond=0)
    assert ask_json(zoe, classroom["id"], "Pourquoi les abeilles dansent-elles ?").status_code == 200
    ask_then_stop(join(classroom["join_code"], "Ben"), classroom["id"], "Stopping?")  # cut short
    eventually(
        lambda: stored_questions(teacher, classroom["id"])[0]["status"] == "incomplete",
        "the cut-short answer was stored",
        30,
    )

    response = teacher.get(f"/api/classrooms/{classroom['id']}/questions.csv")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.content.startswith(codecs.BOM_UTF8)  # Excel on Windows reads UTF-8 only with it
    assert not response.content[3:].startswith(codecs.BOM_UTF8)
    text = response.content.decode("utf-8-sig")
    assert next(csv.reader(io.StringIO(text))) == HEADER
    left, answered = rows_of(response)  # newest first
    assert (answered["Pupil"], answered["Passage"], answered["Status"]) == ("Zoë", "Les abeilles", "answered")
    assert (left["Pupil"], left["Status"]) == ("Ben", "cut short")

    # The same moment twice: the school's clock and UTC, each as a spreadsheet reads a date and time.
    utc = datetime.strptime(answered["Asked (UTC)"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    assert before <= utc <= datetime.now(UTC)
    london = utc.astimezone(ZoneInfo("Europe/London")).strftime("%Y-%m-%d %H:%M:%S")
    assert answered["Asked (Europe/London)"] == london

    # Figures a teacher reads: seconds with one decimal, a percentage, whole token counts.
    first, whole = float(answered["Seconds to first words"]), float(answered["Seconds to whole answer"])
    assert 0 <= first <= whole and answered["Seconds to first words"] == f"{first:.1f}"
    reused = int(answered["Reused from earlier questions (%)"])
    record = next(q for q in stored_questions(teacher, classroom["id"]) if q["pupil"] == "Zoë")
    usage = record["usage"]
    assert reused == round(100 * usage["cached_tokens"] / usage["prompt_tokens"]) and 0 <= reused <= 100
    assert int(answered["Prompt (tokens)"]) == usage["prompt_tokens"] > 80
    assert int(answered["Reused (tokens)"]) == usage["cached_tokens"]
    assert int(answered["Answer (tokens)"]) == usage["completion_tokens"] > 0


def test_another_schools_time_zone_and_a_misspelt_one() -> None:
    asked = datetime(2026, 7, 1, 13, 5, 9, tzinfo=UTC)
    nothing = Usage(prompt_tokens=0, cached_tokens=0, completion_tokens=0)
    record = QuestionRecord(
        id="q1", classroom_id="c1", passage_id="p1", pupil_id="u1", pupil="Ada", question="-1+1?",
        status=QuestionStatus.FAILED, asked_at=asked, usage=nothing,
    )  # fmt: skip
    passage = Passage(id="p1", classroom_id="c1", title="@bees", text="", tokens=1)
    zone = Settings(school=SchoolSettings(time_zone="America/Chicago")).school.zone
    text = questions_csv([record], {"p1": passage}, zone)
    assert text.startswith("\ufeff")
    header, row = csv.reader(io.StringIO(text.removeprefix("\ufeff")))
    assert header[:2] == ["Asked (America/Chicago)", "Asked (UTC)"]
    assert row[:2] == ["2026-07-01 08:05:09", "2026-07-01 13:05:09"]  # summer: UTC-5
    assert row[3:5] == ["'@bees", "'-1+1?"]  # formulas still defused
    assert row[6] == "not answered" and row[9] == ""  # no percentage of nothing

    with pytest.raises(ValidationError, match="'Europe/Londn' is not a time zone"):
        SchoolSettings(time_zone="Europe/Londn")


def test_the_time_zone_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLASSROOM_SCHOOL__TIME_ZONE", "Asia/Kolkata")
    assert Settings().school.zone.utcoffset(datetime(2026, 1, 1)) == timedelta(hours=5, minutes=30)
    monkeypatch.setenv("CLASSROOM_SCHOOL__TIME_ZONE", "Mars/Olympus_Mons")
    with pytest.raises(ValidationError, match="not a time zone"):
        Settings()
