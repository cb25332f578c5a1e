"""Reading a request body within the size limit and parsing it as JSON or YAML."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from cfgcheck.compose import one_line
from cfgcheck.service.errors import RequestError
from cfgcheck.service.settings import JSON_TYPES, YAML_TYPES


def media_type(content_type: str | None) -> str:
    """The parser (``json`` or ``yaml``) for a Content-Type header; 415 for anything else."""
    mime = (content_type or "").split(";")[0].strip().lower()
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


def parse_body(body: bytes, kind: str) -> Any:
    """The JSON or YAML document in ``body``; 400 with the parser's message when malformed."""
    if not body.strip():
        raise RequestError(400, "empty request body; send a run config or {config_name, overrides}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(400, f"the body is not UTF-8 text: {e}") from e
    try:
        return json.loads(text) if kind == "json" else _load_yaml(text)
    except RequestError:
        raise
    except RecursionError:
        raise RequestError(422, "the document nests too deeply; not accepted") from None
    except ValueError as e:  # JSONDecodeError, int strings over Python's digit limit, YAML
        raise RequestError(400, f"malformed {kind.upper()}: {one_line(e)}") from e


# libyaml's composer recurses in C on flow collections ("[[[[...") and crashes the process
# long before Python's recursion limit; flow nesting is bounded before it parses anything.
MAX_FLOW_NESTING = 64
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def flow_nesting(body: bytes) -> int:
    """An upper bound of the ``[``/``{`` nesting in ``body`` (brackets in strings count too)."""
    depth = deepest = 0
    for byte in body.translate(None, delete=_NOT_BRACKETS):
        depth = depth + 1 if byte in b"[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


def _load_yaml(text: str) -> Any:
    import yaml

    if flow_nesting(text.encode("utf-8")) > MAX_FLOW_NESTING:
        raise RequestError(
            422,
            f"the document nests [ ] / {{ }} deeper than {MAX_FLOW_NESTING} levels; not accepted",
        )

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # a safe loader: plain data only
    except yaml.YAMLError as e:
        raise ValueError(one_line(e)) from e
