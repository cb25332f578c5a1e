"""The hard limit per request of ``cfgcheck serve`` (:mod:`cfgcheck.service.supervisor`): a
request stuck in one C call past ``--hard-timeout`` gets its worker process killed and
replaced by the supervisor, while the other worker goes on serving.

The stuck call is real: the C library's ``sleep`` called through ``ctypes.PyDLL``, which holds
the GIL for the whole call, so nothing else of that worker runs (no event loop, no watchdog
thread, no cooperative budget check), and through ``ctypes.CDLL``, which releases it (the
event loop answers 504 at ``--timeout``). The server is started with the test-only
``CFGCHECK_FAULT_INJECTION=1`` (:mod:`cfgcheck.service.faults`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.test_service_workers import (  # noqa: E402
    Server,
    free_port,
    start,
    stop,
    worker_pids,
)

pytestmark = pytest.mark.slow  # a real server of two worker processes, and one respawn each
TIMEOUT_S = 2
HARD_S = 4
VALID = {"overrides": ["data.max_seq_length=3063"]}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = start(
        free_port(),
        "--threads",
        "2",
        "--timeout",
        str(TIMEOUT_S),
        "--hard-timeout",
        str(HARD_S),
        env={"CFGCHECK_FAULT_INJECTION": "1"},
    )
    try:
        yield s
    finally:
        if s.proc.poll() is None:  # the last test stops it and reads its log
            stop(s)


def valid(server: Server) -> httpx.Response:
    with httpx.Client() as fresh:  # a fresh connection: whichever worker accepts it
        return fresh.post(f"{server.url}/v1/validate", json=VALID, timeout=60)


def replaced(server: Server, before: set[int], stuck: Any) -> tuple[set[int], list[int]]:
    """Wait for the stuck request to end and a new worker to answer /readyz; the worker pids
    then and the statuses of valid requests sent meanwhile."""
    statuses = []
    while stuck.is_alive():  # while the request is stuck: the other worker serves
        statuses.append(valid(server).status_code)
        time.sleep(0.2)
    deadline = time.monotonic() + 120
    while True:
        now = worker_pids(server.proc.pid)
        fresh = now - before
        if fresh:
            with httpx.Client() as c:
                ready = c.get(f"{server.url}/readyz", timeout=10)
            if ready.status_code == 200 and ready.json()["pid"] in fresh:
                return now, statuses
        assert time.monotonic() < deadline, "no new worker ready within 120 s"
        time.sleep(0.3)


def stuck_request(server: Server, fault: str, attacker: str, outcome: dict[str, Any]) -> None:
    """POST a request that sits 60 s in a C call, from ``attacker``; what it got in
    ``outcome``."""
    began = time.monotonic()
    try:
        with httpx.Client(transport=httpx.HTTPTransport(local_address=attacker)) as c:
            r = c.post(
                f"{server.url}/v1/validate", json={"cfgcheck-fault": {fault: 60}}, timeout=60
            )
        outcome["answer"] = str(r.status_code)  # the answer came at --timeout
    except httpx.TransportError as e:  # the worker died with the connection
        outcome["answer"] = "closed"
        outcome["error"] = type(e).__name__
    outcome["seconds"] = time.monotonic() - began


@pytest.mark.parametrize(
    ("fault", "client_sees", "attacker", "strikes"),
    [
        # nothing of the worker runs: no answer at all; the worker is frozen, so every client
        # with a request on it gets a strike, and is refused at the second
        ("hold-gil", "closed", "127.0.0.2", 2),
        # the event loop runs: 504 at --timeout; only the stuck request is past its
        # deadline, and its client is refused at once
        ("release-gil", "504", "127.0.0.3", 1),
    ],
)
def test_a_request_stuck_in_a_c_call_gets_its_worker_replaced(
    server: Server, fault: str, client_sees: str, attacker: str, strikes: int
) -> None:
    """The stuck request (from ``attacker``, a loopback address of its own) ends by the hard
    limit, its worker is replaced while the other serves the valid clients (127.0.0.1), and
    its client is then refused by every worker."""
    for strike in range(strikes):
        before = worker_pids(server.proc.pid)
        assert len(before) == 2
        with httpx.Client(transport=httpx.HTTPTransport(local_address=attacker)) as c:
            assert c.get(f"{server.url}/readyz", timeout=10).status_code == 200
        outcome: dict[str, Any] = {}
        thread = threading.Thread(target=stuck_request, args=(server, fault, attacker, outcome))
        thread.start()
        time.sleep(0.5)
        after, meanwhile = replaced(server, before, thread)

        assert outcome["answer"] == client_sees, (strike, outcome)
        # 60 s asked; ended at the timeout (504) or at the hard limit (the kill), well before
        assert outcome["seconds"] < HARD_S + 10, (strike, outcome)
        assert len(after) == 2 and len(before - after) == 1  # one worker replaced, one kept
        assert all(status == 200 for status in meanwhile), (strike, meanwhile)
        for _ in range(4):  # and after: every valid request answered
            r = valid(server)
            assert r.status_code == 200 and "findings" in r.json()
        with httpx.Client() as c:
            assert c.get(f"{server.url}/readyz", timeout=10).status_code == 200
    for _ in range(4):  # the offender, on whichever worker: refused for five minutes
        with httpx.Client(transport=httpx.HTTPTransport(local_address=attacker)) as c:
            refused = c.post(f"{server.url}/v1/validate", json=VALID, timeout=60)
        assert refused.status_code == 429, refused.text
        assert 0 < int(refused.headers["retry-after"]) <= 300
        assert "hard limit" in refused.json()["detail"]


def test_the_supervisor_logs_the_kill_and_the_readiness(server: Server) -> None:
    """Run last in the module: SIGTERM, then the log of the replacements above."""
    time.sleep(2)  # the supervisor logs a worker ready at its next ping (every 0.5 s)
    out = stop(server)
    assert out.count("past the hard limit of 4 s (stuck in one call; ") == 3, out
    # the request holding the GIL: a strike, then refused at the second
    assert out.count("frozen by a call holding the GIL: a strike for 1 client(s)") == 2, out
    assert out.count("0 refused for 300 s at their second strike") == 1, out
    assert out.count("1 refused for 300 s at their second strike") == 1, out
    # the request releasing it: the worker drains, its client is refused at once
    assert out.count("draining: a validation is stuck past its deadline") == 1, out
    assert out.count("1 client(s) with requests past their deadline refused for 300 s") == 1, out
    # two workers at start, three replacements; a replacement that the next stuck request
    # froze before the supervisor's next ping never got its line
    assert out.count("] ready") >= 4, out
    assert server.proc.returncode == 0
    assert "Traceback" not in out, out
