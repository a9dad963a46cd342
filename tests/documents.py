"""Real files of each kind a teacher may upload, made in memory."""

import io
import zipfile
import zlib
from collections.abc import Callable
from typing import IO

import docx


def docx_bytes(paragraphs: list[str], title: str | None = None) -> bytes:
    """A Word document; `title`: its title property (File > Info in Word)."""
    document = docx.Document()
    if title is not None:
        document.core_properties.title = title
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pdf_bytes(lines: list[str], title: str | None = None) -> bytes:
    """A one-page PDF with a standard font: the smallest file pypdf reads text from, written by hand
    so that the tests need no PDF-writing library. `title`: its document information's /Title."""
    text_ops = " ".join(f"({line}) Tj T*" for line in lines)
    stream = f"BT /F1 12 Tf 14 TL 72 720 Td {text_ops} ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
    ]
    if title is not None:
        objects.append(f"<< /Title ({title}) >>".encode())
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    info = f" /Info {len(objects)} 0 R" if title is not None else ""
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R{info} >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


# Files no teacher means to upload, and big ones a teacher might: each must end in a 4xx with a sentence while
# the service's memory stays put and its pupils' streams go on (tests/test_hostile_files.py,
# benchmarks/uploads.py).

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
PARAGRAPH = f'<w:p xmlns:w="{W_NS}"><w:r><w:t>Honeybees carry pollen from flower to flower.</w:t></w:r></w:p>'


def _docx_with(document_xml: Callable[[IO[bytes]], object]) -> bytes:
    """A real Word document (python-docx's own template) whose word/document.xml `document_xml` writes."""
    template = zipfile.ZipFile(io.BytesIO(docx_bytes(["placeholder"])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for info in template.infolist():
            if info.filename == "word/document.xml":
                with archive.open("word/document.xml", "w", force_zip64=True) as part:
                    document_xml(part)
            else:
                archive.writestr(info, template.read(info))
    return out.getvalue()


def docx_zip_bomb(xml_mib: int = 263) -> bytes:
    """A valid .docx of about 1 MB whose document.xml is `xml_mib` MiB of the same paragraph (the file that
    grew the service to 18 GB)."""

    def write(part: IO[bytes]) -> None:
        part.write(f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{W_NS}"><w:body>'.encode())
        block = (PARAGRAPH.replace(f' xmlns:w="{W_NS}"', "") * 1000).encode()
        for _ in range(xml_mib * 1024 * 1024 // len(block)):
            part.write(block)
        part.write(b"</w:body></w:document>")

    return _docx_with(write)


def docx_entity_bomb(levels: int = 10) -> bytes:
    """document.xml with 'billion laughs' entities: each level ten of the one below."""
    entities = '<!ENTITY lol0 "Honeybees carry pollen. ">' + "".join(
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, levels)
    )
    xml = (
        f'<?xml version="1.0"?><!DOCTYPE w:document [{entities}]><w:document xmlns:w="{W_NS}"><w:body>'
        f"<w:p><w:r><w:t>&lol{levels - 1};</w:t></w:r></w:p></w:body></w:document>"
    )
    return _docx_with(lambda part: part.write(xml.encode()))


def docx_deep_nesting(depth: int = 200_000) -> bytes:
    """document.xml nested `depth` elements deep (a parser that recurses, or keeps the tree, pays for each)."""
    xml = f'<w:document xmlns:w="{W_NS}"><w:body>' + "<w:sdt>" * depth + "</w:sdt>" * depth + "</w:body></w:document>"
    return _docx_with(lambda part: part.write(xml.encode()))


def _pdf(objects: list[bytes], root: int = 1, info: int | None = None) -> bytes:
    """A PDF of these objects (numbered from 1) with its cross-reference table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    extra = b" /Info %d 0 R" % info if info else b""
    trailer = b"trailer\n<< /Size %d /Root %d 0 R%s >>\nstartxref\n%d\n%%%%EOF\n"
    out.write(trailer % (len(objects) + 1, root, extra, xref))
    return out.getvalue()


def _stream(data: bytes, *, deflate: bool = False) -> bytes:
    body = zlib.compress(data, 9) if deflate else data
    kind = b" /Filter /FlateDecode" if deflate else b""
    return b"<< /Length %d%s >>\nstream\n" % (len(body), kind) + body + b"\nendstream"


def pdf_pages(pages: list[list[str]]) -> bytes:
    """A PDF of one page per item, each with its lines of text in a standard font."""
    font = 3 + 2 * len(pages)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    for i, lines in enumerate(pages):
        page, contents = 3 + 2 * i, 4 + 2 * i
        kids.append(b"%d 0 R" % page)
        ops = " ".join(f"({line}) Tj T*" for line in lines)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >> "
            b"/Contents %d 0 R >>" % (font, contents)
        )
        objects.append(_stream(f"BT /F1 10 Tf 12 TL 40 760 Td {ops} ET".encode()))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(pages))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return _pdf(objects)


def long_pdf(pages: int = 800, lines: int = 60) -> bytes:
    """A legitimate book-length PDF (800 pages of text, ~4.4 MB): far more than a passage holds."""
    line = "Worker bees collect nectar and pollen from the flowers of the meadow all day"
    return pdf_pages([[f"{line} {p}.{n}" for n in range(lines)] for p in range(pages)])


def pdf_empty_pages(pages: int = 10_000) -> bytes:
    """Pages without text, one short line on the first."""
    return pdf_pages([["Bees."]] + [[] for _ in range(pages - 1)])


def pdf_counting_pages(declared: int) -> bytes:
    """A page tree that says it holds `declared` pages and whose only kid is itself: counting by walking it fails."""
    return _pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [2 0 R] /Count %d >>" % declared,
        ]
    )


def pdf_understating(pages: int) -> bytes:
    """`pages` pages of text whose page tree says it holds one."""
    return pdf_pages([[f"Page {n}."] for n in range(pages)]).replace(b"/Count %d >>" % pages, b"/Count 1 >>")


def pdf_stream_bomb(mib: int = 500) -> bytes:
    """One page whose content stream inflates from about 0.5 MB to `mib` MiB of text operators."""
    ops = b"(Bees carry pollen.) Tj T* " * (mib * 1024 * 1024 // 27)
    return _pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
            b"/Contents 5 0 R >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            _stream(b"BT /F1 10 Tf 12 TL 40 760 Td " + ops + b" ET", deflate=True),
        ]
    )


def pdf_recursive_pages() -> bytes:
    """A page tree whose node lists itself among its kids, and an object stream that refers to itself."""
    return _pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents [4 0 R 4 0 R] >>",
            b"<< /Length 5 0 R /Filter /FlateDecode /DecodeParms 4 0 R >>\nstream\nxx\nendstream",
            b"4 0 R",
        ]
    )


def truncated(data: bytes) -> bytes:
    """The first half of a file, as an upload cut off on the way."""
    return data[: len(data) // 2]
