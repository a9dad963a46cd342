"""Teachers add passages by pasting or uploading, choose the one pupils see, and export the questions."""

import csv
import io

import httpx
import pytest

from tests.documents import docx_bytes, pdf_bytes
from tests.helpers import (
    Join,
    add_passage,
    ask_json,
    create_classroom,
    error_of,
    exported_rows,
    passage_text,
    stored_questions,
)

BEES = ["Honeybees live in colonies.", "Worker bees collect nectar from flowers."]


def upload(teacher: httpx.Client, classroom_id: str, filename: str, data: bytes, title: str = "") -> httpx.Response:
    return teacher.post(
        f"/api/classrooms/{classroom_id}/passages/upload",
        files={"file": (filename, data)},
        data={"title": title, "publish": "true"} if title else {"publish": "true"},
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
    # The file's name, or a Markdown file's own first heading.
    assert added["title"] == ("Bees" if filename.endswith(".md") else "bees") and added["tokens"] > 10
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


def test_adding_a_passage_does_not_publish_it_until_the_teacher_does(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    cid = classroom["id"]
    bees = add_passage(teacher, cid, passage_text(60), title="Bees", publish=False)
    assert bees["published"] is False and bees["version"] == 1
    ada = join(classroom["join_code"], "Ada")
    assert ada.get("/api/pupil/me").json()["passage"] is None  # not even a class's first passage
    refused = ask_json(ada, cid, "About bees?")
    assert refused.status_code == 409
    assert "publish one" in error_of(refused)["message"]

    teacher.put(f"/api/classrooms/{cid}/active-passage", json={"passage_id": bees["id"]}).raise_for_status()
    assert ada.get("/api/pupil/me").json()["passage"]["title"] == "Bees"
    ants = add_passage(teacher, cid, passage_text(60), title="Ants", publish=False)
    assert ada.get("/api/pupil/me").json()["passage"]["title"] == "Bees"  # mid-lesson, nothing moved
    detail = teacher.get(f"/api/classrooms/{cid}").json()
    assert [p["title"] for p in detail["passages"]] == ["Bees", "Ants"]
    assert detail["active_passage_id"] == bees["id"]
    assert detail["passage_max_tokens"] > bees["tokens"]

    teacher.put(f"/api/classrooms/{cid}/active-passage", json={"passage_id": ants["id"]}).raise_for_status()
    assert ada.get("/api/pupil/me").json()["passage"]["title"] == "Ants"
    at_once = add_passage(teacher, cid, passage_text(60), title="Wasps", publish=True)
    assert at_once["published"] is True
    assert ada.get("/api/pupil/me").json()["passage"]["title"] == "Wasps"


@pytest.mark.parametrize(
    ("filename", "data", "typed", "title"),
    [
        ("scan_0042.docx", docx_bytes(BEES, title="The Honeybee Colony"), "", "The Honeybee Colony"),
        ("scan_0042.pdf", pdf_bytes(BEES, title="Bees at Work"), "", "Bees at Work"),
        ("notes.md", ("Intro.\n\n# Life in the Hive\n\n" + "\n\n".join(BEES)).encode(), "", "Life in the Hive"),
        ("Bees for 4B.txt", "\n\n".join(BEES).encode(), "", "Bees for 4B"),  # no title of its own
        ("bees.docx", docx_bytes(BEES), "", "bees"),  # an empty title property
        ("scan_0042.docx", docx_bytes(BEES, title="The Honeybee Colony"), "Typed by me", "Typed by me"),
    ],
)
def test_an_upload_takes_the_typed_title_else_the_documents_own_else_the_file_name(
    teacher: httpx.Client, filename: str, data: bytes, typed: str, title: str
) -> None:
    classroom = create_classroom(teacher)
    response = teacher.post(
        f"/api/classrooms/{classroom['id']}/passages/upload", files={"file": (filename, data)}, data={"title": typed}
    )
    assert response.status_code == 201, response.text
    added = response.json()
    assert added["title"] == title
    assert added["published"] is False  # an upload, too, waits to be published
    detail = teacher.get(f"/api/classrooms/{classroom['id']}").json()
    assert detail["active_passage_id"] is None and detail["passages"][0]["title"] == title


def test_editing_a_passage_makes_a_new_version_and_its_questions_keep_the_old(
    teacher: httpx.Client, join: Join
) -> None:
    classroom = create_classroom(teacher, "Class 5A")
    cid = classroom["id"]
    bees = add_passage(teacher, cid, passage_text(60), title="Bees")
    ants = add_passage(teacher, cid, passage_text(60), title="Ants", publish=False)
    ada = join(classroom["join_code"], "Ada")
    assert ask_json(ada, cid, "Why do bees dance?").json()["status"] == "answered"

    new_text = "Bees dance to show the way to flowers. " + passage_text(40)
    edited = teacher.put(
        f"/api/classrooms/{cid}/passages/{bees['id']}", json={"title": "Bees, again", "text": new_text}
    )
    assert edited.status_code == 200, edited.text
    second = edited.json()
    assert second["id"] != bees["id"] and second["version"] == 2 and second["published"] is True
    seen = ada.get("/api/pupil/me").json()["passage"]  # the active one's new version, at once
    assert (seen["id"], seen["title"], seen["text"]) == (second["id"], "Bees, again", new_text)
    detail = teacher.get(f"/api/classrooms/{cid}").json()
    assert [(p["id"], p["version"]) for p in detail["passages"]] == [(second["id"], 2), (ants["id"], 1)]
    assert detail["passages"][0]["previous_id"] == bees["id"]
    assert detail["former_passages"] == [{"id": bees["id"], "title": "Bees", "version": 1}]
    (asked,) = stored_questions(teacher, cid)
    assert asked["passage_id"] == bees["id"]
    rows = exported_rows(teacher, cid)
    assert [r["Passage"] for r in rows] == ["Bees"]  # the title it was asked about

    # A passage pupils do not see stays unpublished; an old version is no longer in the list.
    quiet = teacher.put(f"/api/classrooms/{cid}/passages/{ants['id']}", json={"title": "Ants", "text": "Ants dig."})
    assert quiet.json()["published"] is False and quiet.json()["version"] == 2
    assert teacher.get(f"/api/classrooms/{cid}").json()["active_passage_id"] == second["id"]
    for response in (
        teacher.put(f"/api/classrooms/{cid}/passages/{bees['id']}", json={"title": "Old", "text": "Old."}),
        teacher.put(f"/api/classrooms/{cid}/active-passage", json={"passage_id": bees["id"]}),
    ):
        assert response.status_code == 404
        assert error_of(response)["code"] == "passage_not_found"
    too_long = teacher.put(
        f"/api/classrooms/{cid}/passages/{second['id']}", json={"title": "Long", "text": passage_text(5000)}
    )
    assert too_long.status_code == 422 and "Please cut at least" in error_of(too_long)["message"]
    assert ada.get("/api/pupil/me").json()["passage"]["id"] == second["id"]


def test_deleting_a_passage_keeps_it_for_its_questions_but_not_the_one_pupils_see(
    teacher: httpx.Client, join: Join
) -> None:
    classroom = create_classroom(teacher)
    cid = classroom["id"]
    bees = add_passage(teacher, cid, passage_text(60), title="Bees")
    ada = join(classroom["join_code"], "Ada")
    assert ask_json(ada, cid, "Why do bees dance?").status_code == 200
    refused = teacher.delete(f"/api/classrooms/{cid}/passages/{bees['id']}")
    assert refused.status_code == 409
    assert error_of(refused) == {
        "code": "passage_in_use",
        "message": "Pupils are reading this passage now, so it cannot be deleted. Publish another passage "
        "first, then delete this one.",
    }

    ants = add_passage(teacher, cid, passage_text(60), title="Ants")
    assert teacher.delete(f"/api/classrooms/{cid}/passages/{bees['id']}").status_code == 204
    detail = teacher.get(f"/api/classrooms/{cid}").json()
    assert [p["id"] for p in detail["passages"]] == [ants["id"]]
    assert detail["former_passages"] == [{"id": bees["id"], "title": "Bees", "version": 1}]
    assert [q["passage_id"] for q in stored_questions(teacher, cid)] == [bees["id"]]
    assert [q["question"] for q in stored_questions(teacher, cid, passage_id=bees["id"])] == ["Why do bees dance?"]
    rows = exported_rows(teacher, cid)
    assert [r["Passage"] for r in rows] == ["Bees"]
    for response in (
        teacher.delete(f"/api/classrooms/{cid}/passages/{bees['id']}"),
        teacher.put(f"/api/classrooms/{cid}/active-passage", json={"passage_id": bees["id"]}),
    ):
        assert response.status_code == 404
        assert error_of(response)["code"] == "passage_not_found"
