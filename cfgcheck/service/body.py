"""Reading a request body within the size limit and parsing it as JSON or YAML (through
:mod:`cfgcheck.safeio`, the one bounded reader every input goes through)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from cfgcheck.safeio import Limits
from cfgcheck.service.errors import RequestError
from cfgcheck.service.settings import JSON_TYPES, YAML_TYPES


def mime_of(content_type: str | None) -> str:
    """The media type of a Content-Type header, without its parameters, lower-cased."""
    return (content_type or "").split(";")[0].strip().lower()


def media_type(content_type: str | None) -> str:
    """The parser (``json`` or ``yaml``) for a Content-Type header; 415 for anything else."""
    mime = mime_of(content_type)
    if mime in JSON_TYPES or (mime.startswith("application/") and mime.endswith("+json")):
        return "json"
    if mime in YAML_TYPES:
        return "yaml"
    accepted = ", ".join((*JSON_TYPES, *YAML_TYPES))
    raise RequestError(
        415, f"unsupported Content-Type {mime or '(none)'!r}; send one of: {accepted}"
    )


def _too_large(limit: int, size: str) -> RequestError:
    return RequestError(413, f"request body of {size} bytes is over the limit of {limit} bytes")


async def read_limited(
    content_length: str | None, stream: AsyncIterator[bytes], limit: int
) -> bytes:
    """The whole body, refused with 413 on the declared length or while streaming."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise RequestError(400, f"invalid Content-Length {content_length!r}") from None
        if declared > limit:
            raise _too_large(limit, str(declared))
    chunks: list[bytes] = []
    size = 0
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            raise _too_large(limit, f"more than {limit}")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_within(
    content_length: str | None, stream: AsyncIterator[bytes], limit: int, timeout: float
) -> bytes:
    """:func:`read_limited`, refused with 408 if the body has not arrived within ``timeout``."""
    import asyncio

    try:
        return await asyncio.wait_for(read_limited(content_length, stream, limit), timeout)
    except TimeoutError:
        raise RequestError(408, f"the request body did not arrive within {timeout:g} s") from None


def parse_body(body: bytes, kind: str, limits: Limits | None = None) -> Any:
    """The JSON or YAML document in ``body``, read by :mod:`cfgcheck.safeio` (nesting, aliases,
    keys, tags and sizes bounded before a parser builds anything): 400 when it is not UTF-8
    or malformed, 422 when it crosses a bound."""
    from cfgcheck.safeio import UnsafeInput, decode, load_json_text, load_yaml_text

    if not body.strip():
        raise RequestError(400, "empty request body; send a run config or {config_name, overrides}")
    limits = limits or Limits(max_bytes=len(body))
    try:
        text = decode(body, "the body")
        if kind == "json":
            return load_json_text(text, "the body", limits)
        return load_yaml_text(text, "the body", limits)
    except UnsafeInput as e:
        message = str(e)
        malformed = message.startswith("malformed") or "not UTF-8" in message
        raise RequestError(400 if malformed else 422, message) from None
