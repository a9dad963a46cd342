"""A classroom's questions as CSV, for teachers' spreadsheets."""

import csv
import io
import unicodedata
from collections.abc import Iterable
from urllib.parse import quote

from service.records import Passage, QuestionRecord, pupil_label

COLUMNS = [
    "asked_at", "pupil", "passage", "question", "answer", "status",
    "prompt_tokens", "cached_tokens", "completion_tokens", "ttft_ms", "total_ms",
]  # fmt: skip


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    # A cell starting with = + - @ is a formula to a spreadsheet: quote it so a question cannot run one.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def questions_csv(questions: Iterable[QuestionRecord], passages: dict[str, Passage]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    for q in questions:
        passage = passages.get(q.passage_id)
        usage = q.usage
        writer.writerow(
            _cell(v)
            for v in (
                q.asked_at.isoformat(timespec="seconds"),
                pupil_label(q.pupil, q.pupil_number),
                passage.title if passage else q.passage_id,
                q.question,
                q.answer,
                q.status.value,
                usage.prompt_tokens if usage else None,
                usage.cached_tokens if usage else None,
                usage.completion_tokens if usage else None,
                round(q.ttft_ms) if q.ttft_ms is not None else None,
                round(q.total_ms) if q.total_ms is not None else None,
            )
        )
    return out.getvalue()


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
