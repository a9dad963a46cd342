"""Reading uploaded files: what each kind gives, the limits that look inside before parsing, and the child
process that holds whatever they miss within its memory and time (no service, no vLLM)."""

import asyncio
import io
import zipfile
from collections.abc import Callable

import docx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.classroom.document_worker import DocumentReader
from service.classroom.documents import Document, ReadingLimits, read_document
from service.errors import DocumentTooComplex, ServiceError, TooManyPages, UnreadableFile
from service.settings import DocumentSettings
from tests import documents

pytestmark = pytest.mark.slow  # readers in child processes, bounded in memory and time

LIMITS = ReadingLimits(max_chars=20_000, max_pages=50, max_xml_bytes=8 * 1024 * 1024, max_compression_ratio=100)
TOO_COMPLEX = "This document is too large or too complex to read. Paste its text instead"


def read(filename: str, data: bytes, limits: ReadingLimits = LIMITS) -> Document:
    return read_document(filename, data, limits)


def test_each_kind_gives_its_text_and_its_own_title() -> None:
    word = read("bees.docx", documents.docx_bytes(["Honeybees live in colonies.", "", "Workers fly."], title="Bees"))
    assert word == Document("Bees", "Honeybees live in colonies.\n\nWorkers fly.", False)
    pdf = read("bees.pdf", documents.pdf_bytes(["Honeybees live in colonies."], title="Bee facts"))
    assert pdf.title == "Bee facts" and "Honeybees live in colonies." in pdf.text
    assert read("bees.md", "# Bees\n\nThey fly.".encode("utf-8-sig")) == Document("Bees", "# Bees\n\nThey fly.")
    assert read("BEES.TXT", b"  They fly.\n") == Document(None, "They fly.")


def test_a_word_documents_tables_tabs_and_line_breaks_are_read_as_word_shows_them() -> None:
    document = docx.Document()
    paragraph = document.add_paragraph("Bees")
    paragraph.add_run().add_tab()
    paragraph.add_run("fly").add_break()
    paragraph.add_run("home.")
    document.add_table(rows=1, cols=1).cell(0, 0).text = "Queen bee"
    out = io.BytesIO()
    document.save(out)
    assert read("bees.docx", out.getvalue()).text == "Bees\tfly\nhome.\n\nQueen bee"


def test_reading_stops_once_the_text_is_longer_than_any_passage() -> None:
    limits = ReadingLimits(max_chars=1000, max_pages=50, max_xml_bytes=8 * 1024 * 1024, max_compression_ratio=100)
    paragraphs = [f"Paragraph {i} about bees and the flowers they visit." for i in range(500)]
    for filename, data in [
        ("long.docx", documents.docx_bytes(paragraphs)),
        ("long.pdf", documents.pdf_pages([[p] for p in paragraphs[:40]])),
        ("long.txt", "\n\n".join(paragraphs).encode()),
    ]:
        document = read(filename, data, limits)
        assert document.cut and len(document.text) <= 1000, filename
    assert not read("short.txt", b"Bees.", limits).cut


@pytest.mark.parametrize(
    ("filename", "make", "error"),
    [
        ("bomb.docx", lambda: documents.docx_zip_bomb(100), DocumentTooComplex),
        ("laughs.docx", documents.docx_entity_bomb, UnreadableFile),
        ("deep.docx", lambda: documents.docx_deep_nesting(50_000), UnreadableFile),
        ("deeper.docx", documents.docx_deep_nesting, DocumentTooComplex),  # refused by its compression alone
        ("empty.pdf", lambda: documents.pdf_empty_pages(1000), TooManyPages),
        ("loop.pdf", documents.pdf_recursive_pages, UnreadableFile),
        ("half.pdf", lambda: documents.truncated(documents.long_pdf(5)), UnreadableFile),
        ("half.docx", lambda: documents.truncated(documents.docx_bytes(["Bees."] * 200)), UnreadableFile),
        ("pdf.docx", lambda: documents.long_pdf(1), UnreadableFile),
        ("docx.pdf", lambda: documents.docx_bytes(["Bees."]), UnreadableFile),
        ("notes.odt", lambda: b"PK", UnreadableFile),
    ],
)
def test_hostile_and_broken_files_are_refused_with_a_sentence(
    filename: str, make: Callable[[], bytes], error: type[ServiceError]
) -> None:
    with pytest.raises(error) as raised:
        read(filename, make())
    assert raised.value.message.endswith(".") and len(raised.value.message.split()) > 6


def test_a_zip_bomb_is_refused_by_what_its_archive_says_before_anything_is_inflated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bomb = documents.docx_zip_bomb(100)
    part = zipfile.ZipFile(io.BytesIO(bomb)).getinfo("word/document.xml")
    assert part.file_size > 99 * 1024 * 1024 and part.compress_size < 1024 * 1024
    opened: list[str] = []
    open_part = zipfile.ZipFile.open

    def recording(archive: zipfile.ZipFile, name: str | zipfile.ZipInfo, *args: object, **kwargs: object) -> object:
        opened.append(name if isinstance(name, str) else name.filename)
        return open_part(archive, name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(zipfile.ZipFile, "open", recording)
    with pytest.raises(DocumentTooComplex):
        read("bomb.docx", bomb)
    assert "word/document.xml" not in opened, "the bomb's text part was inflated"
    small_limit = ReadingLimits(max_chars=20_000, max_pages=50, max_xml_bytes=1024, max_compression_ratio=10**6)
    with pytest.raises(DocumentTooComplex):  # too big, whatever its ratio
        read("ok.docx", documents.docx_bytes(["Bees carry pollen."] * 100), small_limit)


def test_a_pdf_with_too_many_pages_says_how_many_and_what_to_do() -> None:
    with pytest.raises(TooManyPages) as raised:
        read("book.pdf", documents.pdf_empty_pages(51))
    assert raised.value.message.startswith("This PDF has 51 pages") and "at most 50 are read" in raised.value.message


def test_a_pdfs_page_count_is_read_from_its_page_tree_before_any_page() -> None:
    # 10,000 pages took a slow machine's reader past its time walking the tree; the count needs no walk at all.
    with pytest.raises(TooManyPages) as raised:
        read("huge.pdf", documents.pdf_counting_pages(10_000))
    assert raised.value.message.startswith("This PDF has 10,000 pages")
    # A count that understates is no way past the limit: the pages are still counted one by one.
    with pytest.raises(TooManyPages) as raised:
        read("liar.pdf", documents.pdf_understating(60))
    assert raised.value.message.startswith("This PDF has 60 pages")


def reader(**settings: float) -> DocumentReader:
    return DocumentReader(DocumentSettings(**settings), max_chars=20_000)


def test_the_child_process_reads_a_file_and_passes_its_refusals_on_unchanged() -> None:
    document = asyncio.run(reader().read("bees.docx", documents.docx_bytes(["Honeybees."], title="Bees")))
    assert document == Document("Bees", "Honeybees.", False)
    with pytest.raises(ServiceError) as raised:
        asyncio.run(reader().read("empty.pdf", documents.pdf_empty_pages(300)))
    assert (raised.value.status_code, raised.value.code) == (422, "too_many_pages")
    assert raised.value.message.startswith("This PDF has 300 pages")


def test_a_file_that_takes_longer_than_its_time_is_stopped_and_refused() -> None:
    # 10 MB of text operators in one page's stream: pypdf takes minutes over it.
    with pytest.raises(DocumentTooComplex) as raised:
        asyncio.run(reader(time_s=1.0).read("stream.pdf", documents.pdf_stream_bomb(10)))
    assert raised.value.message.startswith(TOO_COMPLEX)


def test_a_file_that_needs_more_memory_than_its_reader_has_is_refused() -> None:
    # Its stream inflates to 70 MB (pypdf's own bound is 75), which pypdf's parse then multiplies.
    with pytest.raises(DocumentTooComplex):
        asyncio.run(reader(memory_mib=256, time_s=60).read("stream.pdf", documents.pdf_stream_bomb(70)))


def test_readers_at_once_are_bounded_per_process() -> None:
    async def three_at_once() -> float:
        slow = reader(readers=1, time_s=1.0)
        began = asyncio.get_running_loop().time()
        results = await asyncio.gather(
            *(slow.read("stream.pdf", documents.pdf_stream_bomb(10)) for _ in range(3)), return_exceptions=True
        )
        assert all(isinstance(r, DocumentTooComplex) for r in results)
        return asyncio.get_running_loop().time() - began

    assert asyncio.run(three_at_once()) >= 3.0  # one after another, each stopped at its second


VALID = {
    ".docx": documents.docx_bytes(["Honeybees live in colonies.", "Workers fly."], title="Bees"),
    ".pdf": documents.pdf_pages([["Honeybees live in colonies."], ["Workers fly."]]),
    ".md": b"# Bees\n\nHoneybees live in colonies.",
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(VALID)),
    flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=8),
    cut=st.floats(0.05, 1.0),
    tail=st.binary(max_size=64),
)
def test_any_damage_to_a_real_file_ends_in_its_text_or_a_sentence(
    kind: str, flips: list[tuple[float, int]], cut: float, tail: bytes
) -> None:
    """A fuzz: bytes of real files flipped, the file cut short, junk after it. Reading gives text or one of our
    errors with a sentence, never another exception (which would be a 500)."""
    data = bytearray(VALID[kind])
    for where, value in flips:
        data[int(where * len(data))] = value
    damaged = bytes(data[: max(1, int(cut * len(data)))]) + tail
    try:
        document = read(f"file{kind}", damaged)
    except ServiceError as exc:
        assert exc.status_code == 422 and exc.message.endswith(".")
    else:
        assert document.text.strip()
