"""Teachers add passages by pasting or uploading, choose the one pupils see, and export the questions."""

import csv
import io

import httpx
import pytest

from tests.conftest import Join
from tests.documents import docx_bytes, pdf_bytes
from tests.helpers import add_passage, ask_json, create_classroom, error_of, passage_text

BEES = ["Honeybees live in colonies.", "Worker bees collect nectar from flowers."]


def upload(teacher: httpx.Client, classroom_id: str, filename: str, data: bytes, title: str = "") -> httpx.Response:
    return teacher.post(
        f"/api/classrooms/{classroom_id}/passages/upload",
        files={"file": (filename, data)},
        data={"title": title} if title else {},
    )


@pytest.mark.parametrize(
    ("filename", "data"),
    [
        ("bees.docx", docx_bytes(BEES)),
        ("bees.pdf", pdf_bytes(BEES)),
        ("bees.txt", "\n\n".join(BEES).encode()),
        ("bees.md", ("# Bees\n\n" + "\n\n".join(BEES)).encode("utf-8-sig")),
    ],
)
def test_uploaded_files_become_passages_pupils_read(
    teacher: httpx.Client, join: Join, filename: str, data: bytes
) -> None:
    classroom = create_classroom(teacher)
    response = upload(teacher, classroom["id"], filename, data)
    assert response.status_code == 201, response.text
    added = response.json()
    assert added["title"] == "bees" and added["tokens"] > 10
    passage = join(classroom["join_code"], "Ada").get("/api/pupil/me").json()["passage"]
    assert passage["id"] == added["id"]
    for sentence in BEES:
        assert sentence in passage["text"]


@pytest.mark.parametrize(
    ("filename", "data", "message"),
    [
        ("empty.txt", b"  \n ", "There is no text in this file."),
        ("blank.docx", docx_bytes([]), "There is no text in this file."),
        ("broken.docx", b"PK\x03\x04 not really a zip", "could not be read as a Word document"),
        ("broken.pdf", b"%PDF-1.4 nothing here", "could not be read as a PDF"),
        ("latin1.txt", "caf\xe9".encode("latin-1"), "not plain text in UTF-8"),
        ("bees.exe", b"MZ", "Files of type '.exe' cannot be read"),
    ],
)
def test_empty_or_unreadable_files_are_refused_with_a_reason(
    teacher: httpx.Client, filename: str, data: bytes, message: str
) -> None:
    classroom = create_classroom(teacher)
    first = add_passage(teacher, classroom["id"], passage_text(50))
    response = upload(teacher, classroom["id"], filename, data)
    assert response.status_code == 422
    assert message in error_of(response)["message"]
    detail = teacher.get(f"/api/classrooms/{classroom['id']}").json()
    assert [p["id"] for p in detail["passages"]] == [first["id"]]
    assert detail["active_passage_id"] == first["id"]


def test_a_file_over_the_size_limit_is_413(teacher: httpx.Client) -> None:
    classroom = create_classroom(teacher)
    response = upload(teacher, classroom["id"], "huge.txt", b"a" * (5 * 1024 * 1024 + 1))
    assert response.status_code == 413
    assert error_of(response)["message"] == "This file is too large: the most is 5 MB."


def test_an_uploaded_passage_over_the_budget_says_how_much_to_cut(teacher: httpx.Client) -> None:
    classroom = create_classroom(teacher)
    response = upload(teacher, classroom["id"], "long.docx", docx_bytes([passage_text(5000)]), title="Long")
    assert response.status_code == 422
    assert "Please cut at least" in error_of(response)["message"]


def test_the_teacher_chooses_which_passage_pupils_see(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    bees = add_passage(teacher, classroom["id"], passage_text(60), title="Bees")
    ants = add_passage(teacher, classroom["id"], passage_text(60), title="Ants")
    ada = join(classroom["join_code"], "Ada")
    assert ada.get("/api/pupil/me").json()["passage"]["title"] == "Ants"

    chosen = teacher.put(f"/api/classrooms/{classroom['id']}/active-passage", json={"passage_id": bees["id"]})
    assert chosen.status_code == 200 and chosen.json()["active_passage_id"] == bees["id"]
    assert ada.get("/api/pupil/me").json()["passage"]["title"] == "Bees"
    assert ask_json(ada, classroom["id"], "About bees?").json()["status"] == "answered"

    other = create_classroom(teacher, "Another class")
    response = teacher.put(f"/api/classrooms/{other['id']}/active-passage", json={"passage_id": ants["id"]})
    assert response.status_code == 404
    assert error_of(response)["code"] == "passage_not_found"


def test_csv_export_has_every_question_and_defuses_formulas(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher, "Class 5A")
    add_passage(teacher, classroom["id"], passage_text(60), title="Bees")
    ada = join(classroom["join_code"], "Ada")
    assert ask_json(ada, classroom["id"], "Why do bees dance?").status_code == 200
    assert ask_json(ada, classroom["id"], '=HYPERLINK("http://evil")').status_code == 200

    response = teacher.get(f"/api/classrooms/{classroom['id']}/questions.csv")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert 'filename="Class 5A-questions.csv"' in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode("utf-8-sig"))))
    assert [r["Question"] for r in rows] == ['\'=HYPERLINK("http://evil")', "Why do bees dance?"]
    assert all(r["Pupil"] == "Ada" and r["Passage"] == "Bees" and r["Status"] == "answered" for r in rows)
    assert all(int(r["Prompt (tokens)"]) > 60 and r["Answer"] for r in rows)
