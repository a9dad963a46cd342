"""A classroom's questions as CSV, for teachers' spreadsheets.

The file opens with a UTF-8 byte-order mark: without it Excel on Windows reads the bytes as the machine's
code page, and every accented name comes out garbled. Columns are named for a teacher; times are the
school's (a setting) beside UTC, in a form spreadsheets read as a date and time.
"""

import asyncio
import csv
import io
import unicodedata
from collections.abc import AsyncIterator, Iterable
from datetime import datetime
from urllib.parse import quote
from zoneinfo import ZoneInfo

from service.records import Passage, QuestionRecord, QuestionStatus, pupil_label

BOM = "\ufeff"
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
STATUS_WORDS = {
    QuestionStatus.ANSWERING: "still answering",
    QuestionStatus.ANSWERED: "answered",
    QuestionStatus.INCOMPLETE: "cut short",
    QuestionStatus.FAILED: "not answered",
    QuestionStatus.REFUSED: "not taken (too busy)",
}


def columns(zone: ZoneInfo) -> list[str]:
    return [
        f"Asked ({zone.key})", "Asked (UTC)", "Pupil", "Passage", "Question", "Answer", "Status",
        "Seconds to first words", "Seconds to whole answer", "Reused from earlier questions (%)",
        "Prompt (tokens)", "Reused (tokens)", "Answer (tokens)",
    ]  # fmt: skip


def _seconds(ms: float | None) -> str | None:
    return None if ms is None else f"{ms / 1000:.1f}"


def _time(moment: datetime, zone: ZoneInfo) -> str:
    return moment.astimezone(zone).strftime(TIME_FORMAT)


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    # A cell starting with = + - @ is a formula to a spreadsheet: quote it so a question cannot run one.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class QuestionsCsv:
    """The file in pieces: its header, then the rows of each page of questions as it is read, so that a class of
    a school year of questions is never held whole, nor written in one go on the event loop."""

    def __init__(self, passages: dict[str, Passage], zone: ZoneInfo) -> None:
        self._passages = passages
        self._zone = zone
        self._utc = ZoneInfo("UTC")

    def header(self) -> str:
        """The byte-order mark and the columns' names: encode it, and every piece after it, as UTF-8."""
        return BOM + self.rows([], header=True)

    def rows(self, questions: Iterable[QuestionRecord], *, header: bool = False) -> str:
        out = io.StringIO()
        writer = csv.writer(out)
        if header:
            writer.writerow(columns(self._zone))
        writer.writerows(self._row(q) for q in questions)
        return out.getvalue()

    def _row(self, q: QuestionRecord) -> list[str]:
        passage = self._passages.get(q.passage_id)
        usage = q.usage
        return [
            _cell(v)
            for v in (
                _time(q.asked_at, self._zone),
                _time(q.asked_at, self._utc),
                pupil_label(q.pupil, q.pupil_number),
                passage.title if passage else q.passage_id,
                q.question,
                q.answer,
                STATUS_WORDS.get(q.status, q.status.value),
                _seconds(q.ttft_ms),
                _seconds(q.total_ms),
                round(100 * usage.cached_tokens / usage.prompt_tokens) if usage and usage.prompt_tokens else None,
                usage.prompt_tokens if usage else None,
                usage.cached_tokens if usage else None,
                usage.completion_tokens if usage else None,
            )
        ]

    async def pieces(self, pages: AsyncIterator[list[QuestionRecord]]) -> AsyncIterator[str]:
        """The file a page of rows at a time, the event loop let run between pages: sending a piece suspends
        only while the client's socket is full, and pages that come without a wait (the archive's, from a file
        read once) would otherwise be made one after another, a streaming answer's tokens held behind them."""
        yield self.header()
        async for page in pages:
            yield self.rows(page)
            await asyncio.sleep(0)


def questions_csv(questions: Iterable[QuestionRecord], passages: dict[str, Passage], zone: ZoneInfo) -> str:
    """The whole text of the file, byte-order mark first: encode it as UTF-8."""
    file = QuestionsCsv(passages, zone)
    return file.header() + file.rows(questions)


def attachment(filename: str) -> str:
    """A Content-Disposition for any file name (RFC 6266): an ASCII `filename` for old clients and, when
    the name is not plain ASCII, its UTF-8 form in `filename*` (RFC 5987), which browsers prefer. Header
    values are Latin-1 on the wire: a raw "Year 5 🌋" in them cannot be sent at all."""
    printable = "".join(c for c in filename if unicodedata.category(c)[0] != "C")
    fallback = "".join(c if c.isascii() and c not in '"\\' else "_" for c in printable)
    header = f'attachment; filename="{fallback}"'
    if fallback != printable:
        header += f"; filename*=UTF-8''{quote(printable, safe='')}"
    return header
