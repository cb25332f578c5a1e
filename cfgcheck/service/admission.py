"""Admission control of one worker process: who may start a validation, and how many wait.

A validation is *in flight* from the moment it is admitted (after its body has arrived) until
its thread ends, a request answered 504 included until its thread stops. Per worker process:

* at most ``max_per_client`` in flight per client address, else **429** with ``Retry-After``:
  one client cannot take every validation thread, however many connections it opens;
* at most ``threads + max_queue`` in flight in all (``max_queue`` waiting for a thread), else
  **503** with ``Retry-After``: a full queue is answered at once instead of waiting;
* none while a validation has outlived its deadline by half the time between the deadline
  and the hard limit (2.5 s by default): it is stuck in one call the cooperative budget
  cannot stop, and the supervisor will kill this worker at the hard limit. A supervised worker
  then drains (stops accepting connections, closes idle ones, answers those in flight: the
  drain hook of :mod:`cfgcheck.service.slots`), and what still reaches it gets **503** with
  ``Connection: close``, so the client retries on a fresh connection, which another worker
  accepts;
* none of a client whose request got a worker killed at the hard limit, for
  ``REFUSE_OFFENDER_S`` seconds, in every worker (the supervisor's offenders table,
  :class:`cfgcheck.service.slots.Offenders`): **429** with ``Retry-After``.

The client address is the connection's peer. ``X-Forwarded-For`` is believed only when the
peer is a trusted proxy (``ServiceSettings.trusted_proxies``): the client is then the
right-most address of the header that is not itself a trusted proxy (the one the first
trusted hop saw), as nginx's ``real_ip_recursive`` reads it. uvicorn's own proxy-header
handling is turned off (``cfgcheck.service.http.uvicorn_options``): it would believe the
header from any loopback peer.
"""

from __future__ import annotations

import contextvars
import ipaddress
import math
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from cfgcheck.service.errors import RequestError
from cfgcheck.service.settings import ServiceSettings
from cfgcheck.service.slots import Offenders, Slots

RETRY_AFTER_S = "1"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# The client of the request being handled, set by :class:`ClientAddress` for the route.
current_client: contextvars.ContextVar[str] = contextvars.ContextVar(
    "cfgcheck_client", default="unknown"
)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


class Proxies:
    """The trusted proxies: addresses and networks."""

    def __init__(self, trusted: tuple[str, ...]) -> None:
        self.networks: list[Network] = [ipaddress.ip_network(p, strict=False) for p in trusted]

    def trusts(self, host: str) -> bool:
        address = _address(host)
        return address is not None and any(address in n for n in self.networks)

    def client(self, peer: str, forwarded_for: list[str]) -> str:
        """The client's address: ``peer``, or from ``X-Forwarded-For`` when ``peer`` is trusted."""
        if not self.networks or not self.trusts(peer):
            return peer
        hops = [h.strip() for value in forwarded_for for h in value.split(",") if h.strip()]
        for hop in reversed(hops):
            if _address(hop) is None:  # garbage in the header: the last trusted hop is it
                return peer
            if not self.trusts(hop):
                return hop
            peer = hop
        return peer


class ClientAddress:
    """ASGI middleware: puts the request's client address in :data:`current_client`."""

    def __init__(self, app: Any, proxies: Proxies) -> None:
        self.app = app
        self.proxies = proxies

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] == "http":
            peer = scope.get("client") or ("unknown", 0)
            forwarded = [
                value.decode("latin-1")
                for name, value in scope.get("headers", ())
                if name == b"x-forwarded-for"
            ]
            current_client.set(self.proxies.client(str(peer[0]), forwarded))
        await self.app(scope, receive, send)


class Admission:
    """Counts validations in flight, in all and per client (see the module's docstring)."""

    def __init__(self, settings: ServiceSettings, slots: Slots) -> None:
        self.limit = settings.max_in_flight
        self.per_client = settings.max_per_client
        # Past its deadline, a validation stops at its next check within milliseconds; one
        # still running halfway to the hard limit is stuck in one call.
        timeout = settings.request_timeout_s
        self.stuck_after_s = timeout + (settings.hard_limit_s - timeout) / 2
        self.slots = slots
        self.offenders = Offenders()
        self.count = 0
        self.clients: dict[str, int] = {}
        self._lock = threading.Lock()

    def draining(self) -> bool:
        """Whether a validation of this worker has outlived its deadline (it is stuck)."""
        return self.slots.stuck(self.stuck_after_s)

    def full(self) -> bool:
        return self.count >= self.limit or self.draining()

    def enter(self, client: str) -> None:
        """Admit one validation of ``client``, or raise :class:`RequestError` (429 or 503)."""
        if self.draining():
            raise RequestError(
                503,
                "this worker is draining (a validation is stuck past its deadline); retry",
                {"Retry-After": RETRY_AFTER_S, "Connection": "close"},
            )
        refused_s = self.offenders.refused_for(client)
        if refused_s > 0:
            raise RequestError(
                429,
                "a request of this client ran past the hard limit and its worker was killed; "
                f"its requests are refused for {math.ceil(refused_s)} s more",
                {"Retry-After": str(math.ceil(refused_s))},
            )
        with self._lock:
            mine = self.clients.get(client, 0)
            if mine >= self.per_client:
                raise RequestError(
                    429,
                    f"this client already has {mine} validation(s) in flight (the limit per "
                    f"client is {self.per_client}); retry when one is answered",
                    {"Retry-After": RETRY_AFTER_S},
                )
            if self.count >= self.limit:
                raise RequestError(
                    503,
                    "too many validations in flight; retry in a moment",
                    {"Retry-After": RETRY_AFTER_S},
                )
            self.count += 1
            self.clients[client] = mine + 1

    def leave(self, client: str) -> None:
        with self._lock:
            self.count -= 1
            left = self.clients.get(client, 1) - 1
            if left > 0:
                self.clients[client] = left
            else:
                self.clients.pop(client, None)
