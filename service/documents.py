"""Text out of the files teachers upload as passages: .txt, .md, .docx and .pdf."""

import io
import zipfile
from pathlib import PurePath

import docx
from docx.opc.exceptions import PackageNotFoundError
from pypdf import PdfReader
from pypdf.errors import PyPdfError

from service.errors import UnreadableFile

SUPPORTED = (".txt", ".md", ".docx", ".pdf")


def _plain(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(
            "This file is not plain text in UTF-8. Save it as UTF-8 text and upload it again."
        ) from exc


def _docx(data: bytes) -> str:
    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise UnreadableFile("This file could not be read as a Word document (.docx).") from exc
    return "\n\n".join(p.text for p in document.paragraphs if p.text.strip())


def _pdf(data: bytes) -> str:
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError) as exc:
        raise UnreadableFile("This file could not be read as a PDF.") from exc
    return "\n\n".join(page.strip() for page in pages if page.strip())


def extract_text(filename: str, data: bytes) -> str:
    suffix = PurePath(filename).suffix.lower()
    if suffix in (".txt", ".md"):
        text = _plain(data)
    elif suffix == ".docx":
        text = _docx(data)
    elif suffix == ".pdf":
        text = _pdf(data)
    else:
        raise UnreadableFile(f"Files of type '{suffix or filename}' cannot be read. Use {', '.join(SUPPORTED)}.")
    if not text.strip():
        raise UnreadableFile(
            "There is no text in this file. If it is a scanned PDF, copy the text and paste it instead."
        )
    return text.strip()
