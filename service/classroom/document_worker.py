"""Uploaded files read in a child process each, apart from the service's event loop and memory.

A file is whatever a teacher's computer, or anyone with a teacher's password, sends: a 1 MB .docx can hold
gigabytes of XML, and a PDF can be built to make its reader loop. `documents.py` looks inside before it
parses; what it misses is bounded here. The child caps its own address space (RLIMIT_AS) and CPU time
(RLIMIT_CPU: what a file may cost) before it imports a parser, runs at a lower priority than the service, and is
killed when its wall-clock time is up (a bound for a stuck reader, far above its CPU time: a busy machine stretches
a low-priority reader's clock, not its CPU time); its result comes back as JSON on stdout. Whatever way it fails,
the service answers the teacher with a sentence and its own memory does not move. A process a file costs ~0.2 s
of start-up, nothing beside a teacher's upload; at most `documents.readers` run at once per service process.

    python -m service.classroom.document_worker '{"filename": ..., "limits": {...}, ...}' < file
"""

import asyncio
import dataclasses
import logging
import os
import resource
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import orjson

from service.classroom.documents import Document, ReadingLimits, read_document
from service.errors import DocumentTooComplex, RaisedElsewhere, ServiceError

if TYPE_CHECKING:  # the child needs none of the settings' imports
    from service.settings import DocumentSettings

log = logging.getLogger(__name__)

FILENAME_KEPT = 200
# The child's priority below the service's (nice): on a small machine its parsing must not delay pupils' streams.
NICENESS = 10


class DocumentReader:
    """Reads one file at a time per slot, each in a child process of its own within `settings`' limits."""

    def __init__(self, settings: "DocumentSettings", max_chars: int) -> None:
        self._settings = settings
        self._limits = ReadingLimits(
            max_chars=max_chars,
            max_pages=settings.max_pages,
            max_xml_bytes=settings.max_xml_mib * 1024 * 1024,
            max_compression_ratio=settings.max_compression_ratio,
        )
        self._slots = asyncio.Semaphore(settings.readers)

    async def read(self, filename: str, data: bytes) -> Document:
        async with self._slots:
            # A thread waits on the child (subprocess' own timeout kills it), so the event loop never does.
            return await anyio.to_thread.run_sync(self._read_in_child, filename, data)

    def _read_in_child(self, filename: str, data: bytes) -> Document:
        filename = filename[-FILENAME_KEPT:]  # its end says its kind; a name can be longer than a command line takes
        job = {
            "filename": filename,
            "limits": dataclasses.asdict(self._limits),
            "memory_bytes": self._settings.memory_mib * 1024 * 1024,
            "cpu_s": self._settings.time_s,
        }
        argv = [sys.executable, "-m", __name__, orjson.dumps(job).decode()]
        wall_s = max(self._settings.wall_s, self._settings.time_s)
        try:
            done = subprocess.run(argv, input=data, capture_output=True, timeout=wall_s, check=False)
        except subprocess.TimeoutExpired as exc:
            log.warning("reading %r (%d bytes) took over %.0f s of the clock: stopped", filename, len(data), wall_s)
            raise DocumentTooComplex() from exc
        if done.returncode != 0:
            # Out of memory, out of CPU time (SIGXCPU), or a parser that crashed: the file is the cause.
            reason = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            log.warning("reading %r (%d bytes) failed: %s", filename, len(data), reason[0][:300])
            raise DocumentTooComplex()
        result = orjson.loads(done.stdout)
        if "refused" in result:
            refused = result["refused"]
            raise RaisedElsewhere(refused["status_code"], refused["code"], refused["message"])
        return Document(result["title"], result["text"], result["cut"])


def _limit_self(memory_bytes: int, cpu_s: float) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    seconds = max(1, int(cpu_s + 0.999))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    os.nice(NICENESS)
    # Should the machine (or the pod's cgroup) run out of memory all the same, the kernel ends this process first.
    with open("/proc/self/oom_score_adj", "w") as adj:
        adj.write("1000")


def _child(job: dict[str, Any], data: bytes) -> dict[str, Any]:
    try:
        document = read_document(job["filename"], data, ReadingLimits(**job["limits"]))
    except ServiceError as exc:
        return {"refused": {"status_code": exc.status_code, "code": exc.code, "message": exc.message}}
    return {"title": document.title, "text": document.text, "cut": document.cut}


def main() -> None:
    job = orjson.loads(sys.argv[1])
    _limit_self(job["memory_bytes"], job["cpu_s"])
    # A MemoryError, or any other failure, ends the process with a traceback and a status the parent reads.
    sys.stdout.buffer.write(orjson.dumps(_child(job, sys.stdin.buffer.read())))


if __name__ == "__main__":
    main()
