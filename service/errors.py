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
        super().__init__("This classroom has no passage yet. The teacher needs to add one before pupils can ask.")


class PassageTooLong(ServiceError):
    status_code = 422
    code = "passage_too_long"

    def __init__(self, tokens: int, limit: int) -> None:
        over = tokens - limit
        super().__init__(
            f"This passage is {tokens:,} tokens long, but a passage can be at most {limit:,} tokens. "
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


class BackendFailed(ServiceError):
    status_code = 502
    code = "backend_failed"
