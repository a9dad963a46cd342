"""Teachers' classes: the list (when made, how many questions), archiving and deleting, pupils who typed the
same name, and the questions feed's pupil filter and pages; on the real Redis and vLLM."""

from contextlib import closing

import httpx
import redis

from service.settings import Settings
from tests.helpers import (
    Join,
    add_passage,
    ask_json,
    create_classroom,
    error_of,
    exported_rows,
    passage_text,
    seed_questions,
    signed_in_teacher,
    stored_questions,
)


def test_the_class_list_says_when_each_class_was_made_and_how_many_questions_it_has(
    teacher: httpx.Client, join: Join
) -> None:
    quiet = create_classroom(teacher, "Quiet class")
    busy = create_classroom(teacher, "Busy class")
    add_passage(teacher, busy["id"], passage_text(60))
    ada = join(busy["join_code"], "Ada")
    for question in ("Why?", "How?"):
        assert ask_json(ada, busy["id"], question).status_code == 200
    listed = teacher.get("/api/classrooms").json()["classrooms"]
    assert [(c["name"], c["questions"]) for c in listed] == [("Busy class", 2), ("Quiet class", 0)]  # newest first
    assert all(c["created_at"] and c["archived_at"] is None for c in listed)
    assert listed[1]["created_at"] < listed[0]["created_at"]
    assert quiet["created_at"] == listed[1]["created_at"]


def test_an_archived_class_is_closed_to_pupils_and_can_be_restored(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    cid = classroom["id"]
    add_passage(teacher, cid, passage_text(60))
    ada = join(classroom["join_code"], "Ada")

    archived = teacher.patch(f"/api/classrooms/{cid}", json={"archived": True})
    assert archived.status_code == 200 and archived.json()["archived_at"] is not None
    listed = {c["id"]: c for c in teacher.get("/api/classrooms").json()["classrooms"]}
    assert listed[cid]["archived_at"] == archived.json()["archived_at"]
    joining = httpx.post(f"{teacher.base_url}/api/join", json={"join_code": classroom["join_code"], "name": "Ben"})
    asking = ask_json(ada, cid, "Why?")
    for refused in (joining, asking):
        assert refused.status_code == 403
        assert error_of(refused)["code"] == "class_archived"
        assert "put away by the teacher" in error_of(refused)["message"]
    assert ada.get("/api/pupil/me").json()["is_open"] is False
    assert stored_questions(teacher, cid) == []
    # Archiving again changes nothing (not even when it was archived).
    again = teacher.patch(f"/api/classrooms/{cid}", json={"archived": True})
    assert again.json()["archived_at"] == archived.json()["archived_at"]

    restored = teacher.patch(f"/api/classrooms/{cid}", json={"archived": False})
    assert restored.status_code == 200 and restored.json()["archived_at"] is None
    assert ask_json(ada, cid, "Why?").json()["status"] == "answered"
    assert join(classroom["join_code"], "Ben").get("/api/pupil/me").json()["is_open"] is True


def test_deleting_a_class_removes_everything_it_held(
    teacher: httpx.Client, join: Join, settings: Settings, service: str
) -> None:
    classroom = create_classroom(teacher, "Class to delete")
    cid = classroom["id"]
    bees = add_passage(teacher, cid, passage_text(60), title="Bees")
    ants = add_passage(teacher, cid, passage_text(60), title="Ants", publish=False)
    teacher.put(f"/api/classrooms/{cid}/passages/{ants['id']}", json={"title": "Ants", "text": "Ants dig."})
    ada, ada_too = join(classroom["join_code"], "Ada"), join(classroom["join_code"], "ada")
    for pupil in (ada, ada_too):
        assert ask_json(pupil, cid, "Why do bees dance?").status_code == 200
    question_ids = [q["id"] for q in stored_questions(teacher, cid)]
    kept = create_classroom(teacher, "Class to keep")

    assert teacher.delete(f"/api/classrooms/{cid}").status_code == 204
    gone = teacher.get(f"/api/classrooms/{cid}")
    assert gone.status_code == 404 and error_of(gone)["code"] == "classroom_not_found"
    assert [c["id"] for c in teacher.get("/api/classrooms").json()["classrooms"]] == [kept["id"]]
    joining = httpx.post(f"{service}/api/join", json={"join_code": classroom["join_code"], "name": "Ben"})
    assert joining.status_code == 404 and error_of(joining)["code"] == "wrong_join_code"
    asking = ask_json(ada, cid, "Still there?")
    assert asking.status_code == 404 and error_of(asking)["code"] == "classroom_not_found"
    assert ada.get("/api/pupil/questions").json()["questions"] == []

    with closing(redis.Redis.from_url(settings.redis.url)) as r:
        left = [k.decode() for k in r.scan_iter(match=f"*{cid}*", count=10_000)]
        assert left == [f"cls:{cid}:version"]  # bumped for the processes that held the class; it expires
        assert 0 < r.ttl(f"cls:{cid}:version") <= 24 * 3600
        assert not any(r.exists(f"q:{i}") for i in question_ids)
        assert not any(r.zscore("questions:recent", i) for i in question_ids)
        assert not any(r.exists(f"passage:{bees['id']}{suffix}") for suffix in ("", ":questions", ":warmed"))
        assert not r.exists(f"passage:{ants['id']}") and not r.exists(f"joincode:{classroom['join_code']}")
        assert not r.sismember("classrooms", cid)
    # The other teacher's class with the same code space is untouched; deleting twice is a 404.
    assert teacher.get(f"/api/classrooms/{kept['id']}").status_code == 200
    assert teacher.delete(f"/api/classrooms/{cid}").status_code == 404


def test_pupils_who_typed_the_same_name_are_told_apart(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher, "Class 5B")
    cid = classroom["id"]
    add_passage(teacher, cid, passage_text(60))
    pupils = {name: join(classroom["join_code"], name) for name in ("Ada", "ada ", "Ben", "Adam")}
    for name, pupil in pupils.items():
        assert ask_json(pupil, cid, f"A question from {name.strip()}?").status_code == 200

    roster = teacher.get(f"/api/classrooms/{cid}/pupils").json()["pupils"]
    assert [p["label"] for p in roster] == ["Ada", "ada (2)", "Adam", "Ben"]
    assert [(p["name"], p["number"]) for p in roster][:2] == [("Ada", 1), ("ada", 2)]
    questions = stored_questions(teacher, cid)
    assert {q["pupil_label"] for q in questions} == {"Ada", "ada (2)", "Adam", "Ben"}
    assert all("pupil_id" not in q for q in questions)  # teachers never see pupils' ids

    def asked_by(pupil: str) -> list[str]:
        return sorted(q["pupil_label"] for q in stored_questions(teacher, cid, pupil=pupil))

    assert asked_by("ada (2)") == ["ada (2)"]
    assert asked_by("ADA") == ["Ada"]  # a name as listed is that pupil
    assert asked_by("ad") == ["Ada", "Adam", "ada (2)"]  # else every name holding it
    assert asked_by(" da") == ["Ada", "Adam", "ada (2)"]
    assert asked_by("en") == ["Ben"]
    assert asked_by("zz") == []
    assert asked_by("  ") == ["Ada", "Adam", "Ben", "ada (2)"]  # no filter
    passage_id = questions[0]["passage_id"]
    assert len(stored_questions(teacher, cid, pupil="ad", passage_id=passage_id)) == 3
    assert stored_questions(teacher, cid, pupil="ad", passage_id="another") == []
    rows = exported_rows(teacher, cid)
    assert sorted(r["Pupil"] for r in rows) == ["Ada", "Adam", "Ben", "ada (2)"]


def test_the_questions_feed_comes_in_pages_newest_first(teacher: httpx.Client, join: Join, settings: Settings) -> None:
    classroom = create_classroom(teacher)
    passage = add_passage(teacher, classroom["id"], passage_text(60))
    join(classroom["join_code"], "Ada"), join(classroom["join_code"], "ada")  # on the class's list of names
    seeded = seed_questions(settings, classroom["id"], passage["id"], [("Ada", 1), ("ada", 2)], 7, "Because.")
    pages = [
        [q["id"] for q in stored_questions(teacher, classroom["id"], limit="3", offset=str(offset))]
        for offset in (0, 3, 6, 9)
    ]
    assert [len(p) for p in pages] == [3, 3, 1, 0]
    assert sum(pages, []) == seeded[::-1]
    second_ada = [q["id"] for q in stored_questions(teacher, classroom["id"], pupil="Ada (2)", limit="2", offset="1")]
    assert second_ada == [seeded[3], seeded[1]]
    # Past any class's questions, the last page (empty); past what Redis can count, a sentence (the fuzz found a 500).
    for pupil in ("", "ad"):
        assert stored_questions(teacher, classroom["id"], pupil=pupil, offset=str(10**9)) == []
        too_far = teacher.get(f"/api/classrooms/{classroom['id']}/questions", params={"pupil": pupil, "offset": 10**25})
        assert too_far.status_code == 422 and "offset" in error_of(too_far)["message"]


def test_a_teacher_cannot_touch_another_teachers_class_or_its_passages(
    teacher: httpx.Client, settings: Settings, service: str
) -> None:
    with closing(signed_in_teacher(settings, service)) as theirs:
        classroom = create_classroom(theirs)
        cid = classroom["id"]
        passage = add_passage(theirs, cid, passage_text(60), publish=False)
        pid = passage["id"]
        for response in (
            teacher.delete(f"/api/classrooms/{cid}"),
            teacher.patch(f"/api/classrooms/{cid}", json={"archived": True}),
            teacher.get(f"/api/classrooms/{cid}/pupils"),
            teacher.put(f"/api/classrooms/{cid}/passages/{pid}", json={"title": "Mine", "text": "Mine."}),
            teacher.delete(f"/api/classrooms/{cid}/passages/{pid}"),
        ):
            assert response.status_code == 404, response.request.url
            assert error_of(response)["code"] == "classroom_not_found"
        # Nor, from a class of their own, a passage of another class.
        mine = create_classroom(teacher)
        for response in (
            teacher.put(f"/api/classrooms/{mine['id']}/passages/{pid}", json={"title": "Mine", "text": "Mine."}),
            teacher.delete(f"/api/classrooms/{mine['id']}/passages/{pid}"),
        ):
            assert response.status_code == 404 and error_of(response)["code"] == "passage_not_found"
        detail = theirs.get(f"/api/classrooms/{cid}").json()
        assert detail["archived_at"] is None and [p["id"] for p in detail["passages"]] == [pid]


def test_a_class_page_that_is_not_there_says_so(teacher: httpx.Client, settings: Settings, service: str) -> None:
    with closing(signed_in_teacher(settings, service)) as theirs:
        others = create_classroom(theirs)["id"]
    deleted = create_classroom(teacher)["id"]
    assert teacher.delete(f"/api/classrooms/{deleted}").status_code == 204
    for cid in ("no-such-class", others, deleted):
        page = teacher.get(f"/teacher/classes/{cid}")
        assert page.status_code == 404, cid
        assert page.headers["content-type"].startswith("text/html")
        assert "There is no class here" in page.text and 'href="/teacher"' in page.text
