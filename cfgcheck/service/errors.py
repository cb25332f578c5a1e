"""A request the service refuses: an HTTP status and a one-line message for ``{"detail": ...}``."""

from __future__ import annotations


class RequestError(ValueError):
    """A malformed or refused request. ``status`` is the HTTP status to answer with;
    ``headers`` go with the answer (``Retry-After`` is added for 429 and 503)."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers or {}
