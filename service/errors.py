"""The errors a client can get, each with a sentence a pupil, teacher or operator can act on.

Domain code raises these; exception handlers in `service.app` turn every one of them, and any
validation error, into one JSON shape: `{"error": {"code": ..., "message": ...}}`.
"""


class ServiceError(Exception):
    status_code = 500
    code = "internal_error"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}


class ClassroomNotFound(ServiceError):
    status_code = 404
    code = "classroom_not_found"

    def __init__(self, classroom_id: str) -> None:
        super().__init__(f"There is no classroom with the id '{classroom_id}'. Check the link or ask your teacher.")


class NoActivePassage(ServiceError):
    status_code = 409
    code = "no_passage"

    def __init__(self) -> None:
        super().__init__("This classroom has no passage yet. The teacher needs to publish one before pupils can ask.")


class PassageGone(ServiceError):
    status_code = 409
    code = "passage_gone"

    def __init__(self) -> None:
        super().__init__(
            "Your teacher has changed or taken away the passage you were reading, so your question was not asked. "
            "Read the passage on your page now and ask again."
        )


class PassageTooLong(ServiceError):
    status_code = 422
    code = "passage_too_long"

    def __init__(self, tokens: int, limit: int, *, about: bool = False) -> None:
        over = tokens - limit
        super().__init__(
            f"This passage is {'about ' if about else ''}{tokens:,} tokens long, but a passage can be at most "
            f"{limit:,} tokens. "
            f"Please cut at least {over:,} tokens (about {round(over * 0.75):,} words) and try again."
        )
        self.tokens, self.limit, self.over = tokens, limit, over


class QuestionTooLong(ServiceError):
    status_code = 422
    code = "question_too_long"

    def __init__(self, tokens: int, limit: int) -> None:
        super().__init__(
            f"Your question is too long ({tokens} tokens; the most is {limit}). Please ask it in fewer words."
        )


class InvalidInput(ServiceError):
    status_code = 422
    code = "invalid_input"


class VariantNotServing(ServiceError):
    status_code = 409
    code = "variant_not_serving"

    def __init__(self, variant: str, errors: dict[str, str]) -> None:
        found = "; ".join(f"{url}: {error}" for url, error in errors.items()) or "it has no replica"
        super().__init__(
            f"Nothing was changed: no replica of the variant '{variant}' answers ({found}). "
            "Start or fix one of its replicas, then try again; pupils stay where they are."
        )


class BackendUnavailable(ServiceError):
    status_code = 503
    code = "backend_unavailable"
    retry_after_s = 30

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            message
            or "The answering service cannot be reached right now. Your question was saved; "
            "please try again in a minute.",
            headers={"Retry-After": str(self.retry_after_s)},
        )


class StoreFull(ServiceError):
    """Redis reached its memory bound (maxmemory, noeviction): it refuses writes rather than drop anything, so
    nothing was taken and nothing stored before is lost."""

    status_code = 507
    code = "store_full"

    def __init__(self) -> None:
        super().__init__(
            "The service's store is full, so it could not save this. Nothing saved before is lost. Please tell "
            "the school's administrator: older questions can be archived to make room."
        )


class StoreUnavailable(ServiceError):
    """Redis, where every class, passage, question and session is kept, did not answer within the client's
    retries: nothing was taken, and nothing stored before is lost (it is on Redis' disk)."""

    status_code = 503
    code = "store_unavailable"
    retry_after_s = 5

    def __init__(self) -> None:
        super().__init__(
            "The service cannot reach the store where it keeps classes and questions just now, so it could "
            f"not do this. Nothing saved before is lost: please try again in {self.retry_after_s} seconds.",
            headers={"Retry-After": str(self.retry_after_s)},
        )


class BackendFailed(ServiceError):
    status_code = 502
    code = "backend_failed"


class NotSignedIn(ServiceError):
    status_code = 401
    code = "not_signed_in"

    def __init__(self) -> None:
        super().__init__("Please sign in as a teacher first.")


class SignInFailed(ServiceError):
    status_code = 401
    code = "sign_in_failed"

    def __init__(self) -> None:
        super().__init__("That email and password do not match an account. Check them and try again.")


class SessionExpired(ServiceError):
    status_code = 401
    code = "session_expired"

    def __init__(self, pupil: bool) -> None:
        super().__init__(
            "Your session has ended. Please join again with your class code."
            if pupil
            else "Your session has ended. Please sign in again."
        )


class NotJoined(ServiceError):
    status_code = 401
    code = "not_joined"

    def __init__(self) -> None:
        super().__init__("Please join your class first: type the class code your teacher gave you.")


class WrongJoinCode(ServiceError):
    status_code = 404
    code = "wrong_join_code"

    def __init__(self, typed: str) -> None:
        super().__init__(f"There is no class with the code '{typed}'. Check the code with your teacher.")


class ClassClosed(ServiceError):
    status_code = 403
    code = "class_closed"

    def __init__(self) -> None:
        super().__init__("This class is closed right now. Your teacher can open it again.")


class ClassArchived(ServiceError):
    status_code = 403
    code = "class_archived"

    def __init__(self) -> None:
        super().__init__(
            "This class has been put away by the teacher and takes no pupils or questions. "
            "Ask your teacher for the code of the class you are in now."
        )


class WrongClassroom(ServiceError):
    status_code = 403
    code = "wrong_classroom"

    def __init__(self) -> None:
        super().__init__("You joined a different class. You can only ask questions in your own class.")


class OperatorOnly(ServiceError):
    status_code = 403
    code = "operator_only"

    def __init__(self) -> None:
        super().__init__("Only an operator can do this: send the operator token as 'Authorization: Bearer <token>'.")


class AnswerInProgress(ServiceError):
    status_code = 409
    code = "answer_in_progress"

    def __init__(self) -> None:
        super().__init__("Please wait until your answer has finished before you ask another question.")


class QuestionNotFound(ServiceError):
    status_code = 404
    code = "question_not_found"

    def __init__(self) -> None:
        super().__init__("You have no such question. Reload the page to see your questions.")


class AnswerFinished(ServiceError):
    status_code = 409
    code = "answer_finished"

    def __init__(self) -> None:
        super().__init__("This answer has already finished, so there is nothing to stop.")


class TooManyQuestions(ServiceError):
    status_code = 429
    code = "too_many_questions"

    def __init__(self, per_minute: int, retry_after_s: int) -> None:
        super().__init__(
            f"You have asked {per_minute} questions in the last minute. Take a moment to read your answers, "
            f"then ask again in {retry_after_s} seconds.",
            headers={"Retry-After": str(retry_after_s)},
        )


class LineFull(ServiceError):
    status_code = 429
    code = "line_full"

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(
            f"Many pupils are asking at the moment and the line is full. Your question was saved; please ask "
            f"it again in {retry_after_s} seconds.",
            headers={"Retry-After": str(retry_after_s)},
        )


WAITED_TOO_LONG = "Many pupils are asking at the moment and your turn did not come in time. Please ask again."


class TooManyFailedAttempts(ServiceError):
    status_code = 429
    code = "too_many_attempts"

    def __init__(self, what: str, retry_after_s: int) -> None:
        minutes = max(1, round(retry_after_s / 60))
        super().__init__(
            f"Too many {what} from this device. Please wait {minutes} minute{'s' if minutes > 1 else ''}, "
            "then try again, or ask your teacher.",
            headers={"Retry-After": str(retry_after_s)},
        )


class PassageNotFound(ServiceError):
    status_code = 404
    code = "passage_not_found"

    def __init__(self) -> None:
        super().__init__("This class has no such passage.")


class PassageInUse(ServiceError):
    status_code = 409
    code = "passage_in_use"

    def __init__(self) -> None:
        super().__init__(
            "Pupils are reading this passage now, so it cannot be deleted. Publish another passage first, "
            "then delete this one."
        )


class UnreadableFile(ServiceError):
    status_code = 422
    code = "unreadable_file"


class FileTooLarge(ServiceError):
    status_code = 413
    code = "file_too_large"

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"This file is too large: the most is {limit_bytes // (1024 * 1024)} MB.")


class DocumentTooComplex(ServiceError):
    """A file whose reading would take more memory or time than any passage needs: a zip bomb, a PDF built to
    make its reader loop, or one merely huge. Its reader (a process of its own) is stopped, the service is not."""

    status_code = 422
    code = "document_too_complex"

    def __init__(self) -> None:
        super().__init__(
            "This document is too large or too complex to read. Paste its text instead, or save the part pupils "
            "should read as a smaller file."
        )


class TooManyPages(ServiceError):
    status_code = 422
    code = "too_many_pages"

    def __init__(self, pages: int, most: int) -> None:
        super().__init__(
            f"This PDF has {pages:,} pages, more than a passage could come from (at most {most:,} are read). "
            "Save only the pages pupils should read as a PDF and upload that, or paste their text."
        )


class FarTooLong(ServiceError):
    """A text longer than any passage by its length alone (`Prompts.passage_max_chars`): how much longer is not
    counted, since that would mean reading and tokenising all of it."""

    status_code = 422
    code = "passage_too_long"

    def __init__(self, limit_tokens: int) -> None:
        super().__init__(
            f"This text is far longer than a passage can be: a passage can be at most {limit_tokens:,} tokens "
            f"(about {round(limit_tokens * 0.75):,} words). Upload or paste only the part pupils should read."
        )


class RaisedElsewhere(ServiceError):
    """An error of ours raised in another process (a document's reader), answered as it was raised there."""

    def __init__(self, status_code: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
