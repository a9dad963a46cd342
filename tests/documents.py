"""Real files of each kind a teacher may upload, made in memory."""

import io

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
