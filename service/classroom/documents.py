"""Text out of the files teachers upload as passages: .txt, .md, .docx and .pdf, with the title the
document gives itself (a Word document's or PDF's title property, a Markdown file's first heading).

Any file may be hostile, so reading looks inside before it parses and stops as soon as it knows enough:
a .docx's text part is checked by its uncompressed size and compression ratio (a zip bomb is refused
unread) and parsed as a stream, element by element, without entities or a DTD; a PDF's pages are counted
before any is read; and text stops at `ReadingLimits.max_chars`, past which no passage fits (reading page 800
tells nothing page 80 did not). This module runs in a child process with a memory and CPU cap of its own
(`document_worker.py`), which catches whatever these checks miss.
"""

import io
import unicodedata
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePath
from typing import IO, NamedTuple

from lxml import etree
from pypdf import PdfReader
from pypdf.errors import PyPdfError
from pypdf.generic import DictionaryObject

from service.errors import DocumentTooComplex, TooManyPages, UnreadableFile

SUPPORTED = (".txt", ".md", ".docx", ".pdf")
# A title longer than this is not one (the page's title field takes as many).
TITLE_MAX_CHARS = 200
# The parts of a .docx read besides its text (relationships, properties): a few kilobytes in any real file.
SMALL_PART_MAX_BYTES = 1024 * 1024

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
OFFICE_DOCUMENT = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"
# A run's pieces as Word shows them (python-docx's `Paragraph.text` reads the same).
RUN_TEXT = {f"{W}tab": "\t", f"{W}br": "\n", f"{W}cr": "\n", f"{W}noBreakHyphen": "-", f"{W}ptab": "\t"}


@dataclass(frozen=True, slots=True)
class ReadingLimits:
    # Text beyond this many characters is longer than any passage (`Prompts.passage_max_chars`): reading stops.
    max_chars: int
    # A PDF with more pages is refused before any is read.
    max_pages: int
    # A .docx's text part, uncompressed, and how many times smaller it may be compressed.
    max_xml_bytes: int
    max_compression_ratio: int


class Document(NamedTuple):
    title: str | None  # the document's own, if it gives one
    text: str
    cut: bool = False  # reading stopped at `max_chars`: the text goes on, longer than any passage


def _title(value: object) -> str | None:
    """A title as one line of printable text, or None if there is none worth the name."""
    if not isinstance(value, str):
        return None
    printable = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in value[: TITLE_MAX_CHARS * 4])
    title = " ".join(printable.split())
    return title if 0 < len(title) <= TITLE_MAX_CHARS else None


def _markdown_title(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("# "):
            return _title(line[2:].strip().strip("#"))
    return None


def _plain(data: bytes, limits: ReadingLimits) -> tuple[str, bool]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(
            "This file is not plain text in UTF-8. Save it as UTF-8 text and upload it again."
        ) from exc
    return text[: limits.max_chars], len(text) > limits.max_chars


class _Paragraphs:
    """Paragraphs' text joined as the passage will hold it, until there is more than `max_chars` of it."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.parts: list[str] = []
        self.chars = 0

    def add(self, paragraph: str) -> bool:
        """False once the text is longer than `max_chars` (the rest need not be read)."""
        paragraph = paragraph.strip()
        if paragraph:
            self.parts.append(paragraph)
            self.chars += len(paragraph) + 2
        return self.chars <= self.max_chars

    def text(self) -> str:
        return "\n\n".join(self.parts)[: self.max_chars]


# Every part of a .docx is parsed with no entities expanded, no DTD or network fetched, and libxml2's own bounds
# on depth and text size kept (huge_tree off).


def _small_xml(archive: zipfile.ZipFile, name: str) -> etree._Element | None:
    try:
        info = archive.getinfo(name)
    except KeyError:
        return None
    if info.file_size > SMALL_PART_MAX_BYTES:
        raise DocumentTooComplex()
    with archive.open(info) as part:
        parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
        return etree.fromstring(part.read(SMALL_PART_MAX_BYTES + 1), parser)


def _main_part(archive: zipfile.ZipFile) -> str:
    """The document's text part, as the package's relationships name it (word/document.xml from Word)."""
    rels = _small_xml(archive, "_rels/.rels")
    for rel in rels if rels is not None else ():
        if rel.get("Type") == OFFICE_DOCUMENT and rel.get("Target"):
            return str(rel.get("Target")).lstrip("/")
    return "word/document.xml"


def _checked(info: zipfile.ZipInfo, limits: ReadingLimits) -> None:
    """A zip bomb is refused before a byte of it is inflated: by its size, and by how well it compresses (text
    compresses some ten times; a part a hundred times smaller than itself is the same bytes over and over)."""
    if info.file_size > limits.max_xml_bytes:
        raise DocumentTooComplex()
    if info.file_size > SMALL_PART_MAX_BYTES and info.file_size > limits.max_compression_ratio * info.compress_size:
        raise DocumentTooComplex()


def _paragraph_text(paragraph: etree._Element) -> str:
    pieces: list[str] = []
    for element in paragraph.iter(f"{W}t", *RUN_TEXT):
        pieces.append(element.text or "" if element.tag == f"{W}t" else RUN_TEXT[str(element.tag)])
    return "".join(pieces)


def _docx_paragraphs(part: IO[bytes]) -> Iterator[str]:
    """Each paragraph's text, in the order of the document (a text box's before the paragraph that holds it),
    read as a stream: each paragraph is let go once read, so memory holds one at a time."""
    paragraphs = etree.iterparse(
        part, events=("end",), tag=f"{W}p", resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )
    for _, paragraph in paragraphs:
        yield _paragraph_text(paragraph)
        paragraph.clear(keep_tail=False)
        while paragraph.getprevious() is not None:
            del paragraph.getparent()[0]


# What a damaged, encrypted or foreign archive makes of zipfile, zlib and the XML parser (a bad CRC is an OSError).
DAMAGED_ARCHIVE = (
    zipfile.BadZipFile, KeyError, ValueError, EOFError, OSError, RuntimeError, zlib.error, etree.XMLSyntaxError,
)  # fmt: skip


def _docx(data: bytes, limits: ReadingLimits) -> Document:
    unreadable = "This file could not be read as a Word document (.docx)."
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        info = archive.getinfo(_main_part(archive))
        _checked(info, limits)
        paragraphs = _Paragraphs(limits.max_chars)
        with archive.open(info) as part:
            cut = not all(paragraphs.add(p) for p in _docx_paragraphs(part))
        properties = _small_xml(archive, "docProps/core.xml")
    except DAMAGED_ARCHIVE as exc:
        raise UnreadableFile(unreadable) from exc
    title = properties.findtext(DC_TITLE) if properties is not None else None
    return Document(_title(title), paragraphs.text(), cut)


def _pdf(data: bytes, limits: ReadingLimits) -> Document:
    try:
        reader = PdfReader(io.BytesIO(data))
        # The page tree's own count first: one number, however many pages, so that a file of thousands is refused
        # with its page count on any machine. Walking the tree to count (`len(reader.pages)`) takes seconds for
        # 10,000 pages, and a slow reader ran out of its time before it could say how many. A file whose count
        # lies is still counted by the walk, within the reader's time.
        tree = reader.root_object["/Pages"].get_object()
        declared = tree.get("/Count") if isinstance(tree, DictionaryObject) else None
        if isinstance(declared, int) and declared > limits.max_pages:
            raise TooManyPages(declared, limits.max_pages)
        pages = len(reader.pages)
        if pages > limits.max_pages:
            raise TooManyPages(pages, limits.max_pages)
        text = _Paragraphs(limits.max_chars)
        cut = not all(text.add(page.extract_text() or "") for page in reader.pages)
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        # pypdf's own errors, and what a malformed object makes of its parsing
        raise UnreadableFile("This file could not be read as a PDF.") from exc
    try:
        title = _title(reader.metadata.title if reader.metadata else None)
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError):  # a broken information dictionary
        title = None
    return Document(title, text.text(), cut)


def read_document(filename: str, data: bytes, limits: ReadingLimits) -> Document:
    suffix = PurePath(filename).suffix.lower()
    if suffix in (".txt", ".md"):
        text, cut = _plain(data, limits)
        document = Document(_markdown_title(text) if suffix == ".md" else None, text, cut)
    elif suffix == ".docx":
        document = _docx(data, limits)
    elif suffix == ".pdf":
        document = _pdf(data, limits)
    else:
        raise UnreadableFile(f"Files of type '{suffix or filename}' cannot be read. Use {', '.join(SUPPORTED)}.")
    if not document.text.strip():
        raise UnreadableFile(
            "There is no text in this file. If it is a scanned PDF, copy the text and paste it instead."
        )
    return Document(document.title, document.text.strip(), document.cut)
