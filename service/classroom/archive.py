"""Questions kept past the store: each class's archived questions, as files of JSON lines (gzip), in a folder
every service process reaches (`school.archive_dir`: a shared volume in a district).

A batch is written whole and made durable (fsync, then renamed into place) before retention takes its
questions out of the store, so a question is always in one or the other. Should the removal fail after the
file was written, the next round archives the same questions again, from the same first one: the file of the
earlier attempt is replaced, never doubled.
"""

import asyncio
import gzip
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from service.records import QuestionRecord


class QuestionArchive:
    def __init__(self, folder: Path) -> None:
        self._folder = folder

    def write(self, classroom_id: str, records: list[QuestionRecord]) -> Path:
        """One batch of a class's questions (oldest first), durable on disk when this returns: its file."""
        folder = self._class_folder(classroom_id)
        folder.mkdir(parents=True, exist_ok=True)
        first = records[0]
        prefix = f"{first.asked_at:%Y%m%dT%H%M%S}-{first.id}-"
        path = folder / f"{prefix}{records[-1].id}.jsonl.gz"
        partial = path.with_suffix(".partial")
        with open(partial, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
                for record in records:
                    out.write(record.model_dump_json().encode() + b"\n")
            raw.flush()
            os.fsync(raw.fileno())
        for earlier in folder.glob(f"{prefix}*.jsonl.gz"):  # an attempt whose removal from the store failed
            earlier.unlink()
        partial.rename(path)
        directory = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return path

    def files(self, classroom_id: str) -> list[Path]:
        """The class's archive files, oldest questions first."""
        folder = self._class_folder(classroom_id)
        return sorted(folder.glob("*.jsonl.gz")) if folder.is_dir() else []

    async def pages(self, classroom_id: str, size: int) -> AsyncIterator[list[QuestionRecord]]:
        """The class's archived questions, newest first as the questions' export lists them, `size` at a time: a
        file read and decompressed in a thread, its lines made into records a page at a time, so that the event
        loop works in slices of a few milliseconds between a streaming answer's tokens (benchmarks/uploads.py)."""
        for path in reversed(self.files(classroom_id)):
            lines = (await asyncio.to_thread(_lines, path))[::-1]
            for first in range(0, len(lines), size):
                yield [QuestionRecord.model_validate_json(line) for line in lines[first : first + size]]

    def delete(self, classroom_id: str) -> None:
        """A deleted class's archive goes with it."""
        shutil.rmtree(self._class_folder(classroom_id), ignore_errors=True)

    def _class_folder(self, classroom_id: str) -> Path:
        if not classroom_id or not all(c.isalnum() or c in "-_" for c in classroom_id):
            raise ValueError(f"not a classroom id: {classroom_id!r}")  # never a path out of the folder
        return self._folder / classroom_id


def _lines(path: Path) -> list[bytes]:
    """An archive file's records, one JSON line each."""
    return [line for line in gzip.decompress(path.read_bytes()).split(b"\n") if line.strip()]
