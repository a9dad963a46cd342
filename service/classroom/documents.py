"""Text out of the files teachers upload as passages: .txt, .md, .docx and .pdf, with the title the
document gives itself (a Word document's or PDF's title property, a Markdown file's first heading)."""

import io
import unicodedata
import zipfile
from pathlib import PurePath
from typing import NamedTuple

import docx
from docx.opc.exceptions import PackageNotFoundError
from pypdf import PdfReader
from pypdf.errors import PyPdfError

from service.errors import UnreadableFile

SUPPORTED = (".txt", ".md", ".docx", ".pdf")
# A title longer than this is not one (the page's title field takes as many).
TITLE_MAX_CHARS = 200


class Document(NamedTuple):
    title: str | None  # the document's own, if it gives one
    text: str


def _title(value: object) -> str | None:
    """A title as one line of printable text, or None if there is none worth the name."""
    if not isinstance(value, str):
        return None
    printable = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in value)
    title = " ".join(printable.split())
    return title if 0 < len(title) <= TITLE_MAX_CHARS else None


def _markdown_title(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("# "):
            return _title(line[2:].strip().strip("#"))
    return None


def _plain(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(
            "This file is not plain text in UTF-8. Save it as UTF-8 text and upload it again."
        ) from exc


def _docx(data: bytes) -> Document:
    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise UnreadableFile("This file could not be read as a Word document (.docx).") from exc
    text = "\n\n".join(p.text for p in document.paragraphs if p.text.strip())
    return Document(_title(document.core_properties.title), text)


def _pdf(data: bytes) -> Document:
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError) as exc:
        raise UnreadableFile("This file could not be read as a PDF.") from exc
    try:
        title = _title(reader.metadata.title if reader.metadata else None)
    except (PyPdfError, ValueError, KeyError, TypeError):  # a broken information dictionary: no title
        title = None
    return Document(title, "\n\n".join(page.strip() for page in pages if page.strip()))


def read_document(filename: str, data: bytes) -> Document:
    suffix = PurePath(filename).suffix.lower()
    if suffix == ".txt":
        document = Document(None, _plain(data))
    elif suffix == ".md":
        text = _plain(data)
        document = Document(_markdown_title(text), text)
    elif suffix == ".docx":
        document = _docx(data)
    elif suffix == ".pdf":
        document = _pdf(data)
    else:
        raise UnreadableFile(f"Files of type '{suffix or filename}' cannot be read. Use {', '.join(SUPPORTED)}.")
    if not document.text.strip():
        raise UnreadableFile(
            "There is no text in this file. If it is a scanned PDF, copy the text and paste it instead."
        )
    return Document(document.title, document.text.strip())
