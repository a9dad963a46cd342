"""What a teacher's heavy or hostile upload, long paste or big export (of the questions, or of the archive of
those past the school's retention) does to the service and to a pupil whose
answer streams from the same process meanwhile.

One `classroom serve` process (1 worker) in front of the instant fake vLLM, paced at `--tpot-ms` a token, so a
pupil's answer streams for seconds; the pupil asks again as soon as an answer ends, all through the run. Each
case is one request of a teacher on the same process; for it the table gives its answer (status and the first
words of its sentence), how long it took, the pupil's longest silence while it ran (the longest gap between two
reads of the pupil's stream that overlaps the request; a token arrives every `--tpot-ms` otherwise), and the
service's peak memory above what it held before (its VmHWM, reset before each case through /proc/PID/clear_refs,
less its VmRSS then). A case that kills the service is said so, and the service is started again.

    .venv/bin/python -m benchmarks.uploads --label after
    .venv/bin/python -m benchmarks.uploads --label before --checkout /tmp/before --memory-cap-gib 8
    .venv/bin/python -m benchmarks.uploads --report before after     # the table of results/uploads.md

`--checkout` serves another checkout's service/ with that checkout's own .venv (how the `before` column was made,
from 61b5e8b); the memory cap (prlimit --as) keeps a service that would grow to 18 GB from taking the machine
with it.
"""

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.gateway import lag_over, loop_lag
from benchmarks.gateway_parts import configure_fake, profiled, start_fake
from benchmarks.parts import machine, passage
from service.api.deps import PUPIL_COOKIE
from service.classroom.archive import QuestionArchive
from service.local.processes import ManagedProcess, answers_ok, free_port
from service.local.redis_server import start_redis
from service.records import QuestionRecord, QuestionStatus, Usage
from service.settings import PROJECT_ROOT
from service.store import open_store
from tests import documents

STATE = PROJECT_ROOT / "var" / "bench-uploads"
RESULTS = Path(__file__).with_name("results")
PASSWORD = "benchmark password"
EXPORT_QUESTIONS = 20_000
REFUSED_PAGES = 500
ARCHIVED_QUESTIONS = 100_000  # a big class's years, in the files `Retention` writes (5,000 a file here)
CASE_TIMEOUT_S = 400.0


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # upload, paste, export, archive or pages
    filename: str = ""
    make: Callable[[], bytes] = bytes


CASES = [
    Case("docx zip bomb, 263 MB of XML", "upload", "bomb.docx", lambda: documents.docx_zip_bomb(263)),
    Case("docx zip bomb, 100 MB of XML", "upload", "bomb.docx", lambda: documents.docx_zip_bomb(100)),
    Case("docx entity expansion", "upload", "laughs.docx", documents.docx_entity_bomb),
    Case("docx nested 50,000 deep", "upload", "deep.docx", lambda: documents.docx_deep_nesting(50_000)),
    Case("PDF of 800 text pages", "upload", "book.pdf", documents.long_pdf),
    Case("PDF of 150 text pages", "upload", "chapter.pdf", lambda: documents.long_pdf(150)),
    Case("PDF of 10,000 empty pages", "upload", "empty.pdf", documents.pdf_empty_pages),
    Case("PDF, 10 MB content stream", "upload", "stream.pdf", lambda: documents.pdf_stream_bomb(10)),
    Case("PDF, recursive page tree", "upload", "loop.pdf", documents.pdf_recursive_pages),
    Case("PDF cut in half", "upload", "half.pdf", lambda: documents.truncated(documents.long_pdf(20))),
    Case(".docx that is a PDF", "upload", "pdf.docx", lambda: documents.long_pdf(2)),
    Case("5 MB of plain text", "upload", "long.txt", lambda: b"Bees carry pollen from flower to flower. " * 127_000),
    Case("1 MB pasted passage", "paste", make=lambda: ("Bees carry pollen from flower to flower. " * 25_000).encode()),
    # Just under the length past which a passage is refused uncounted (3,636 tokens × 128 characters): counted.
    Case(
        "450 KB pasted passage", "paste", make=lambda: ("Bees carry pollen from flower to flower. " * 11_000).encode()
    ),
    Case(f"CSV of {EXPORT_QUESTIONS:,} questions", "export"),
    Case(f"CSV of {ARCHIVED_QUESTIONS:,} archived questions", "archive"),
    Case(f"{REFUSED_PAGES} pupil pages opened at once with a wrong session", "pages"),
]


@dataclass
class Outcome:
    case: str
    size_bytes: int
    status: int | None = None
    message: str = ""
    seconds: float = 0.0
    longest_silence_s: float = 0.0
    rss_before_mib: float = 0.0
    peak_above_mib: float = 0.0
    service_died: bool = False
    # The service's own event-loop timers due while the case ran, and how many fired over 5 and 20 ms late: the
    # service's side of a silence (the client reads the pupil's stream and the case's answer on one loop too).
    loop_late: dict[str, float] = field(default_factory=dict)


@dataclass
class Pupil:
    """A pupil asking one question after another: the time of every read of their streams."""

    reads: list[float] = field(default_factory=list)
    answers: int = 0
    errors: int = 0

    def longest_silence(self, began: float, ended: float) -> float:
        """The longest gap between reads that overlaps [began, ended] (a read after the end closes the last)."""
        times = sorted(self.reads)
        gaps = [b - a for a, b in zip(times, times[1:], strict=False) if b >= began and a <= ended]
        return max(gaps, default=ended - began)


def _memory_kib(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field_name} for {pid}")


class Service:
    """`classroom serve` in a process of its own, started again should a case kill it."""

    def __init__(self, env: dict[str, str], checkout: Path | None, memory_cap_gib: float | None) -> None:
        self.env = env
        python = checkout / ".venv" / "bin" / "python" if checkout else Path(sys.executable)
        # -P: not the working directory first on the path, where this checkout's service/ would be found
        self.cli = [str(python), "-P", "-c", "from service.cli import app; app()"]
        cap = ["prlimit", f"--as={int(memory_cap_gib * 1024**3)}", "--"] if memory_cap_gib else []
        self.argv = [*cap, *self.cli, "serve"]
        self.url = f"http://127.0.0.1:{env['CLASSROOM_API__PORT']}"
        self.process: ManagedProcess | None = None

    def start(self) -> None:
        self.process = ManagedProcess("service", self.argv, STATE / "logs" / "service.log", env=self.env)
        self.process.start()
        self.process.wait_until(lambda: answers_ok(f"{self.url}/readyz"), 60)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.popen is not None and self.process.popen.poll() is None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def _answered(classroom_id: str, passage_id: str, i: int, asked: float) -> QuestionRecord:
    """The i-th of a class's questions, answered as a finished answer is stored (no model asked)."""
    answer = "Bees carry pollen from one flower to another, which lets the plant make seeds. " * 6
    return QuestionRecord(
        id=uuid.uuid4().hex, classroom_id=classroom_id, passage_id=passage_id, pupil_id=f"p{i % 30}",
        pupil=f"Pupil {i % 30}", pupil_number=1, question=f"Question {i} about bees?",
        status=QuestionStatus.ANSWERED, answer=answer,
        usage=Usage(prompt_tokens=400, cached_tokens=384, completion_tokens=90), ttft_ms=300.0,
        total_ms=2000.0, asked_at=datetime.fromtimestamp(asked, UTC),
    )  # fmt: skip


async def _seed_questions(redis_url: str, classroom_id: str, passage_id: str, count: int) -> None:
    """A school year of one class's questions, stored as finished answers are."""
    start = time.time() - count * 60
    async with open_store(redis_url) as store:
        for i in range(count):
            await store.refuse_question(_answered(classroom_id, passage_id, i, start + i * 60))


def _seed_archive(classroom_id: str, passage_id: str, count: int) -> None:
    """Years of one class's questions past retention, in the service's archive as `Retention` writes it."""
    archive = QuestionArchive(STATE / "archive")
    start = time.time() - 3 * 365 * 86_400
    for first in range(0, count, 5_000):
        archive.write(
            classroom_id, [_answered(classroom_id, passage_id, i, start + i * 60) for i in range(first, first + 5_000)]
        )


async def _keep_asking(url: str, classroom: dict[str, str], pupil: Pupil) -> None:
    """Ask, read the answer to its end, ask again. A pupil whose answer a dying service cut off may not ask again
    until it is stored as ended: another pupil joins in their place (a new session), so the stream goes on."""
    body = {"question": "How do bees help flowers make seeds?"}
    headers = {"Accept": "text/event-stream"}
    asks = f"{url}/api/classrooms/{classroom['id']}/questions"
    while True:
        # unsafe: the cookie jar keeps cookies of an IP address's host (127.0.0.1), which it drops by default
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            try:
                joined = await session.post(
                    f"{url}/api/join", json={"join_code": classroom["join_code"], "name": "Ada"}
                )
                joined.raise_for_status()
                while True:
                    async with session.post(asks, json=body, headers=headers) as response:
                        response.raise_for_status()
                        async for _ in response.content.iter_any():
                            pupil.reads.append(time.perf_counter())
                        pupil.answers += 1
            except aiohttp.ClientError:
                pupil.errors += 1
                await asyncio.sleep(0.5)


async def _refused_pages(client: aiohttp.ClientSession, url: str) -> list[int]:
    """`REFUSED_PAGES` pupil pages opened at once (`GET /api/pupil/events`) with a session that is not one:
    their statuses."""

    async def one(i: int) -> int:
        headers = {"Cookie": f"{PUPIL_COOKIE}=not-a-session-{i}"}
        async with client.get(f"{url}/api/pupil/events", headers=headers) as response:
            await response.read()
            return response.status

    return list(await asyncio.gather(*(one(i) for i in range(REFUSED_PAGES))))


def _reset_peak(pid: int) -> float:
    """VmHWM starts again from VmRSS; returns VmRSS in MiB."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _memory_kib(pid, "VmRSS") / 1024


async def _run_case(
    case: Case,
    data: bytes,
    teacher: aiohttp.ClientSession,
    url: str,
    classroom_id: str,
    service: Service,
    pupil: Pupil,
    profile_dir: Path | None,
) -> Outcome:
    outcome = Outcome(case.name, len(data))
    outcome.rss_before_mib = _reset_peak(service.pid)
    lag_before = await loop_lag(url)
    began = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=CASE_TIMEOUT_S)
    try:
        if case.kind == "upload":
            form = aiohttp.FormData()
            form.add_field("file", data, filename=case.filename)
            form.add_field("title", case.name)
            call = teacher.post(f"{url}/api/classrooms/{classroom_id}/passages/upload", data=form, timeout=timeout)
        elif case.kind == "paste":
            body = {"title": case.name, "text": data.decode()}
            call = teacher.post(f"{url}/api/classrooms/{classroom_id}/passages", json=body, timeout=timeout)
        elif case.kind != "pages":
            file = "questions.csv" if case.kind == "export" else "archive.csv"
            call = teacher.get(f"{url}/api/classrooms/{classroom_id}/{file}", timeout=timeout)
        profile = (
            profile_dir / f"uploads-profile-{case.name.split(',')[0].replace(' ', '-')}.txt" if profile_dir else None
        )
        with profiled(service.pid, profile):
            if case.kind == "pages":  # no `call`: many requests, not one
                statuses = await _refused_pages(teacher, url)
                outcome.status, outcome.message = statuses[-1], f"statuses {sorted(set(statuses))}"
            else:
                async with call as response:
                    outcome.status = response.status
                    payload = await response.read()
                outcome.message = (
                    f"{len(payload):,} bytes" if response.status == 200 else payload.decode(errors="replace")[:160]
                )
    except (aiohttp.ClientError, TimeoutError) as exc:
        outcome.message = f"{type(exc).__name__}: {exc}"[:160]
    outcome.seconds = time.perf_counter() - began
    await asyncio.sleep(0.3)  # the pupil's next read closes the gap the case opened
    if service.alive():
        outcome.loop_late = lag_over(lag_before, await loop_lag(url))
    outcome.longest_silence_s = pupil.longest_silence(began, began + outcome.seconds)
    if service.alive():
        outcome.peak_above_mib = _memory_kib(service.pid, "VmHWM") / 1024 - outcome.rss_before_mib
    else:
        outcome.service_died = True
        service.start()
    return outcome


async def _measure(
    service: Service, redis_url: str, cases: list[tuple[Case, bytes]], profile_dir: Path | None
) -> tuple[list[Outcome], Pupil]:
    url = service.url
    # unsafe: the cookie jar keeps cookies of an IP address's host (127.0.0.1), which it drops by default
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as teacher:
        signed = await teacher.post(
            f"{url}/api/teacher/session", json={"email": service.env["BENCH_TEACHER"], "password": PASSWORD}
        )
        signed.raise_for_status()
        classroom = await (await teacher.post(f"{url}/api/classrooms", json={"name": "Uploads"})).json()
        added = await teacher.post(
            f"{url}/api/classrooms/{classroom['id']}/passages",
            json={"title": "Bees", "text": passage(random.Random(), 300), "publish": True},
        )
        added.raise_for_status()
        passage_id = (await added.json())["id"]
        await _seed_questions(redis_url, classroom["id"], passage_id, EXPORT_QUESTIONS)
        _seed_archive(classroom["id"], passage_id, ARCHIVED_QUESTIONS)
        pupil = Pupil()
        asking = asyncio.create_task(_keep_asking(url, classroom, pupil))
        await asyncio.sleep(2.0)
        outcomes = []
        for case, data in cases:
            outcome = await _run_case(case, data, teacher, url, classroom["id"], service, pupil, profile_dir)
            print(_row(outcome), flush=True)
            outcomes.append(outcome)
            if outcome.service_died:  # a new process, and a pupil who may ask on it
                await asyncio.sleep(2.0)
        asking.cancel()
        return outcomes, pupil


def _row(o: Outcome) -> str:
    answer = "service killed" if o.service_died else f"{o.status} {o.message[:60]!r}"
    return (
        f"| {o.case} | {o.size_bytes / 1e6:.2f} MB | {answer} | {o.seconds:.2f} s | {o.longest_silence_s:.2f} s "
        f"| {o.peak_above_mib:+.0f} MiB | {_late(o.loop_late)} |"
    )


def _late(late: dict[str, float]) -> str:
    """The service's loop timers over 5 and 20 ms late, of those due."""
    if not late:
        return "–"
    return f"{late.get('0.005', 0):.0f} / {late.get('0.02', 0):.0f} of {late.get('timers', 0):.0f}"


def _answer(o: dict[str, Any]) -> str:
    if o["service_died"]:
        return "**the service died**"
    if o["status"] == 200:
        return "200"
    code = re.search(r'"code":"(\w+)"', o["message"])  # the message is kept cut to 160 characters
    return f"{o['status']} {code[1] if code else o['message'][:40]}"


def report(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The two saved runs side by side, a row a case (in the `after` run's order)."""
    old = {o["case"]: o for o in before["cases"]}
    lines = [
        f"| case | file | {before['label']}: answer | took | pupil's silence | peak "
        f"| {after['label']}: answer | took | pupil's silence | peak |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for new in after["cases"]:
        row = [new["case"], f"{new['size_bytes'] / 1e6:.2f} MB"]
        for o in (old.get(new["case"]), new):
            if o is None:
                row += ["–"] * 4
                continue
            peak = "–" if o["service_died"] else f"+{o['peak_above_mib']:.0f} MiB"
            row += [_answer(o), f"{o['seconds']:.2f} s", f"{o['longest_silence_s']:.2f} s", peak]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="after")
    parser.add_argument("--checkout", type=Path, help="serve this checkout's service/ instead (with its .venv)")
    parser.add_argument("--memory-cap-gib", type=float, help="the service's address space, through prlimit --as")
    parser.add_argument("--tpot-ms", type=float, default=20.0, help="the fake vLLM's pace: a token every so often")
    parser.add_argument("--profile-dir", type=Path, help="py-spy over the service during each case, its top here")
    parser.add_argument("--only", nargs="*", help="cases whose name holds one of these words")
    parser.add_argument("--report", nargs=2, metavar=("BEFORE", "AFTER"), help="two saved labels side by side")
    args = parser.parse_args()
    if args.report:
        before, after = (json.loads((RESULTS / f"uploads-{label}.json").read_text()) for label in args.report)
        print(report(before, after))
        return
    cases = [c for c in CASES if not args.only or any(w.lower() in c.name.lower() for w in args.only)]

    STATE.mkdir(parents=True, exist_ok=True)
    redis_port = free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    redis = start_redis(redis_url, redis_port, STATE / f"redis-{redis_port}", STATE / "logs" / "redis.log")
    fake, fake_root = start_fake()
    configure_fake(fake_root, tpot_ms=args.tpot_ms)
    email = f"{uuid.uuid4().hex[:8]}@school.example"
    env = dict(os.environ) | {
        "CLASSROOM_REDIS__URL": redis_url,
        "CLASSROOM_BACKEND__BASE_URL": f"{fake_root}/v1",
        "CLASSROOM_MODEL__DIR": str(PROJECT_ROOT / "var" / "models" / "tiny"),
        "CLASSROOM_STATE_DIR": str(STATE),
        "CLASSROOM_API__PORT": str(free_port()),
        "CLASSROOM_API__WORKERS": "1",
        "CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE": "1000000",
        "CLASSROOM_ROUTING__WARMUP": "false",
        "CLASSROOM_NEW_TEACHER_PASSWORD": PASSWORD,
        "BENCH_TEACHER": email,
    }
    service = Service(env, args.checkout, args.memory_cap_gib)
    try:
        subprocess.run([*service.cli, "teacher", "add", email], env=service.env, check=True, capture_output=True)
        service.start()
        print(
            "| case | file | answer | took | pupil's longest silence | service peak memory "
            "| service loop timers >5 / >20 ms late |"
        )
        print("|---|---|---|---|---|---|---|")
        # Every file made before the pupil starts: making a zip bomb takes seconds of the client's own loop.
        made = [(c, c.make()) for c in cases]
        outcomes, pupil = asyncio.run(_measure(service, redis_url, made, args.profile_dir))
    finally:
        service.stop()
        fake.stop()
        redis.stop()
    print(f"pupil: {pupil.answers} answers, {pupil.errors} errors; a token every {args.tpot_ms:.0f} ms otherwise")
    out = RESULTS / f"uploads-{args.label}.json"
    out.write_text(
        json.dumps(
            {
                "label": args.label,
                "checkout": str(args.checkout or PROJECT_ROOT),
                "memory_cap_gib": args.memory_cap_gib,
                "tpot_ms": args.tpot_ms,
                "machine": machine(),
                "when": datetime.now(UTC).isoformat(timespec="seconds"),
                "pupil": {"answers": pupil.answers, "errors": pupil.errors},
                "cases": [asdict(o) for o in outcomes],
            },
            indent=1,
        )
    )
    print(f"written to {out}")


if __name__ == "__main__":
    main()
