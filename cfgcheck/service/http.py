"""How ``cfgcheck serve`` runs uvicorn: HTTP limits a hostile client cannot hold open.

uvicorn (0.54) bounds the size of a request head (``h11_max_incomplete_event_size``, h11's
default 16 KiB, set here explicitly) and the idle time between requests on a kept-alive
connection (``timeout_keep_alive``), but has no timer on *reading the head itself*: its
keep-alive timer is armed only after a response (``H11Protocol.on_response_complete``) and
cancelled by any byte received (``data_received``), so a client that opens a connection and
dribbles a header byte every few seconds holds it forever. :class:`HeaderTimeoutProtocol`
adds that timer: from the first moment the server waits for a request head (the connection
opening, or the first byte after a response) the whole head must arrive within
``header_timeout_s``, else the connection is closed. The body has its own limit
(``read_within``: 408 after the request timeout).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
MAX_HEAD_BYTES = 16 * 1024
KEEP_ALIVE_S = 5


class HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on receiving each request head."""

    header_timeout_s: float = HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _timed_out(self) -> None:
        self._head_timer = None
        if self._waiting_for_head() and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._waiting_for_head():
            self._arm()
        super().data_received(data)
        if not self._waiting_for_head():
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def uvicorn_options(header_timeout_s: float = HEADER_TIMEOUT_S) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run``/``uvicorn.Config``: the protocol above (with
    ``header_timeout_s``), the head size limit and the keep-alive timeout."""
    protocol = type(
        "HeaderTimeoutProtocol", (HeaderTimeoutProtocol,), {"header_timeout_s": header_timeout_s}
    )
    return {
        "http": protocol,
        "h11_max_incomplete_event_size": MAX_HEAD_BYTES,
        "timeout_keep_alive": KEEP_ALIVE_S,
        # X-Forwarded-For is read by cfgcheck.service.admission, from trusted proxies only;
        # uvicorn's own handling would believe it from any loopback peer.
        "proxy_headers": False,
    }
