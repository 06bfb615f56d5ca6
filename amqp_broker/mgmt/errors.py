"""Errors raised by the management facade (`admin.Admin`) and turned into HTTP replies by
`http.py` (and into "Error: ..." lines by the CLI, which sees them as HTTP status codes).

The JSON bodies follow RabbitMQ's management plugin: {"error": ..., "reason": ...}.
"""

from __future__ import annotations

__all__ = ["AdminError", "NotFoundError", "BadRequest", "NotAuthorised"]


class AdminError(Exception):
    status = 500
    error = "internal_error"

    def __init__(self, reason: str | list) -> None:  # RabbitMQ gives some reasons as lists
        super().__init__(reason)
        self.reason = reason

    def body(self) -> dict:
        return {"error": self.error, "reason": self.reason}


class NotFoundError(AdminError):
    status = 404
    error = "Object Not Found"

    def __init__(self, reason: str = "Not Found") -> None:
        super().__init__(reason)


class BadRequest(AdminError):
    status = 400
    error = "bad_request"


class NotAuthorised(AdminError):
    status = 401
    error = "not_authorised"
