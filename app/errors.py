"""Typed application errors and the single envelope they render to."""

from __future__ import annotations

from typing import Any


class AppError(Exception):
    """An error a client can act on: a stable code, an HTTP status and a message."""

    code = "internal"
    status = 500
    message = "Something went wrong on our side."

    def __init__(self, message: str | None = None, *, data: Any = None, code: str | None = None):
        super().__init__(message or self.message)
        self.message = message or self.message
        self.data = data
        if code:
            self.code = code

    def envelope(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return {"success": False, "error": error}


class BadRequest(AppError):
    code, status, message = "bad_request", 400, "The request could not be understood."


class ValidationFailed(AppError):
    code, status, message = "validation_failed", 400, "Some fields are not valid."

    def __init__(self, errors: list[dict[str, str]], message: str | None = None):
        # The sentence people read is the first problem (they name their field by its
        # label where the service labels them); `data.errors` keeps every field path.
        super().__init__(message or _summary(errors), data={"errors": errors})
        self.errors = errors

    @classmethod
    def one(cls, field: str, message: str) -> ValidationFailed:
        return cls([{"field": field, "message": message}], message)

    @classmethod
    def from_pydantic(cls, exc: Any) -> ValidationFailed:
        """Every pydantic error as {field, message}, with paths like `network.allow_out[2]`."""
        errors = []
        for err in exc.errors(include_url=False, include_input=False):
            message = "Unknown field." if err["type"] == "extra_forbidden" else err["msg"]
            errors.append({"field": field_path(tuple(err["loc"])), "message": message})
        return cls(errors)


def _summary(errors: list[dict[str, str]]) -> str | None:
    if not errors:
        return None
    first = str(errors[0].get("message") or "").strip()
    if not first:
        return None
    first = first[0].upper() + first[1:]
    more = len(errors) - 1
    if not more:
        return first
    return f"{first} There {'is' if more == 1 else 'are'} {more} more problem" \
           f"{'s' if more > 1 else ''}."


def field_path(loc: tuple[Any, ...]) -> str:
    """('network', 'allow_out', 2) -> 'network.allow_out[2]'."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "body"


class Unauthorized(AppError):
    code, status, message = "unauthorized", 401, "Sign in to continue."


class Forbidden(AppError):
    code, status, message = "forbidden", 403, "You are not allowed to do this."


class NotFound(AppError):
    code, status, message = "not_found", 404, "Not found."


class MethodNotAllowed(AppError):
    code, status, message = "method_not_allowed", 405, "This method is not allowed here."


class Conflict(AppError):
    code, status, message = "conflict", 409, "This conflicts with the current state."


class PayloadTooLarge(AppError):
    code, status, message = "payload_too_large", 413, "The request body is too large."


class UnsupportedMediaType(AppError):
    code, status, message = "unsupported_media_type", 415, "Send the body as application/json."


class Gone(AppError):
    code, status, message = "gone", 410, "This is no longer available."


class Locked(AppError):
    code, status, message = "locked", 423, "This resource is locked by another operation."


class RateLimited(AppError):
    code, status, message = "rate_limited", 429, "Too many attempts. Wait a while and try again."


class Internal(AppError):
    code, status, message = "internal", 500, "Something went wrong on our side."


class Unavailable(AppError):
    code, status, message = "unavailable", 503, "A service this needs is not reachable."


HTTP_TO_ERROR: dict[int, type[AppError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    423: Locked,
    429: RateLimited,
    500: Internal,
    503: Unavailable,
}
