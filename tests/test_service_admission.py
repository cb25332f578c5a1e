"""Admission control of the validator service: a per-client cap on validations in flight
(429 + Retry-After), a bounded queue per worker (503 + Retry-After), a worker that stops
admitting while a validation is stuck past its deadline (503, ``Connection: close``), and the
client address (``X-Forwarded-For`` believed only from a trusted proxy).

The first tests run the app in-process (a validation held on an event); the ``slow`` ones
start a real ``cfgcheck serve`` (tests.test_service_workers.start) and send real concurrent
requests over real connections, each holding its thread for 2 s in a C call (the test-only
fault injection of :mod:`cfgcheck.service.faults`)."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402

from cfgcheck.service import ServiceSettings, create_app  # noqa: E402
from cfgcheck.service import runner as service_runner  # noqa: E402
from cfgcheck.service.admission import Proxies  # noqa: E402
from cfgcheck.service.settings import SettingsError  # noqa: E402
from tests.conftest import CONF, REPO  # noqa: E402

VALID = {"overrides": ["data.max_seq_length=3063"]}


def client_for(**overrides: Any) -> TestClient:
    settings = ServiceSettings(**{"config_dir": CONF, "allowed_roots": (REPO,), **overrides})
    return TestClient(create_app(settings))


def at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` in threads started together; their results in order."""
    results: list[Any] = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def one(i: int) -> None:
        start.wait()
        results[i] = calls[i]()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


# --- the client address ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trusted", "peer", "forwarded", "client"),
    [
        ((), "10.0.0.9", ["1.2.3.4"], "10.0.0.9"),  # no trusted proxy: the header is ignored
        (("127.0.0.1",), "10.0.0.9", ["1.2.3.4"], "10.0.0.9"),  # peer not trusted
        (("127.0.0.1",), "127.0.0.1", ["1.2.3.4"], "1.2.3.4"),
        (("127.0.0.1",), "127.0.0.1", [], "127.0.0.1"),
        # a client's own X-Forwarded-For is not believed: the right-most untrusted hop is
        (("10.0.0.0/8",), "10.0.0.2", ["6.6.6.6, 5.5.5.5, 10.1.1.1"], "5.5.5.5"),
        (("10.0.0.0/8",), "10.0.0.2", ["6.6.6.6", "5.5.5.5"], "5.5.5.5"),  # two headers
        (("10.0.0.0/8",), "10.0.0.2", ["not-an-address"], "10.0.0.2"),
        (("::1",), "::1", ["2001:db8::7"], "2001:db8::7"),
    ],
)
def test_client_address(
    trusted: tuple[str, ...], peer: str, forwarded: list[str], client: str
) -> None:
    assert Proxies(trusted).client(peer, forwarded) == client


# --- settings --------------------------------------------------------------------------------


def test_workers_is_the_deprecated_name_of_threads() -> None:
    with pytest.warns(DeprecationWarning, match="threads"):
        settings = ServiceSettings(workers=3)
    assert settings.threads == 3 and settings.workers is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ServiceSettings(threads=5).threads == 5


def test_admission_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CFGCHECK_SERVE_THREADS", "6")
    monkeypatch.setenv("CFGCHECK_SERVE_MAX_QUEUE", "0")
    monkeypatch.setenv("CFGCHECK_SERVE_MAX_PER_CLIENT", "3")
    monkeypatch.setenv("CFGCHECK_SERVE_TRUSTED_PROXIES", "10.0.0.0/8, 127.0.0.1")
    monkeypatch.setenv("CFGCHECK_SERVE_HARD_TIMEOUT", "30")
    s = ServiceSettings()
    assert (s.threads, s.max_queue, s.max_per_client) == (6, 0, 3)
    assert s.trusted_proxies == ("10.0.0.0/8", "127.0.0.1")
    assert s.hard_limit_s == 30 and s.max_in_flight == 6
    monkeypatch.delenv("CFGCHECK_SERVE_HARD_TIMEOUT")
    assert ServiceSettings(request_timeout_s=7).hard_limit_s == 12  # --timeout + 5 s
    monkeypatch.setenv("CFGCHECK_SERVE_MAX_PER_CLIENT", "many")
    with pytest.raises(SettingsError, match="CFGCHECK_SERVE_MAX_PER_CLIENT"):
        ServiceSettings()


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"max_per_client": 0}, "max_per_client=0"),
        ({"max_queue": -1}, "max_queue=-1"),
        ({"request_timeout_s": 10, "hard_timeout_s": 10}, "must be longer"),
        ({"trusted_proxies": ("proxy.internal",)}, "not an IP address"),
    ],
)
def test_admission_settings_out_of_range(overrides: dict[str, Any], phrase: str) -> None:
    with pytest.raises(SettingsError, match=phrase):
        ServiceSettings(**overrides)


# --- in-process: a validation held on an event -----------------------------------------------


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Every validation waits (up to 10 s) until the yielded event is set, as its first step
    (before any deadline check could end it)."""
    monkeypatch.chdir(REPO)
    release = threading.Event()
    real = service_runner.parse_body

    def blocked(*args: Any) -> Any:
        release.wait(10)
        return real(*args)

    monkeypatch.setattr(service_runner, "parse_body", blocked)
    yield release
    release.set()


def test_one_client_gets_429_past_its_cap(held: threading.Event) -> None:
    with client_for(threads=4, max_per_client=2) as c:

        def post() -> Any:
            return c.post("/v1/validate", json=VALID)

        def late() -> Any:
            time.sleep(1.0)  # the first three are in flight by then
            ready = c.get("/readyz")
            held.set()
            return ready

        answers = at_once([post, post, post, late])
    statuses = sorted(r.status_code for r in answers[:3])
    assert statuses == [200, 200, 429], [r.text for r in answers[:3]]
    refused = next(r for r in answers[:3] if r.status_code == 429)
    assert refused.headers["retry-after"] == "1"
    assert "limit per client is 2" in refused.json()["detail"]
    assert answers[3].status_code == 200  # the worker itself is not full: ready


def test_a_worker_with_a_stuck_validation_stops_admitting(held: threading.Event) -> None:
    with client_for(request_timeout_s=0.3, hard_timeout_s=1.3) as c:  # stuck after 0.8 s
        stuck = c.post("/v1/validate", json=VALID)  # 504 at 0.3 s; its thread goes on
        assert stuck.status_code == 504
        assert c.get("/readyz").status_code == 200  # past its deadline, not yet stuck
        time.sleep(1.0)
        ready = c.get("/readyz")
        refused = c.post("/v1/validate", json=VALID)
        held.set()
        for _ in range(100):  # the thread ends: the worker admits again
            again = c.post("/v1/validate", json=VALID)
            if again.status_code == 200:
                break
            time.sleep(0.05)
    assert ready.status_code == 503 and ready.json()["status"] == "draining"
    assert refused.status_code == 503
    assert refused.headers["connection"] == "close" and refused.headers["retry-after"] == "1"
    assert "draining" in refused.json()["detail"]
    assert again.status_code == 200


# --- a real server, real connections ---------------------------------------------------------

FAULT = {"cfgcheck-fault": {"release-gil": 2}}  # holds its thread 2 s (GIL released)


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    from tests.test_service_workers import free_port, start, stop

    s = start(
        free_port(),
        "--threads",
        "2",
        "--max-queue",
        "1",
        "--max-per-client",
        "1",
        "--trusted-proxy",
        "127.0.0.1",
        workers=1,
        env={"CFGCHECK_FAULT_INJECTION": "1"},
    )
    try:
        yield s
    finally:
        out = stop(s)
        assert "Traceback" not in out, out


def post_as(
    url: str, client: str | None, body: dict[str, Any], local: str = "", delay: float = 0.0
) -> Any:
    """A POST over a fresh connection after ``delay`` seconds, from ``local`` (a loopback
    address) and with ``X-Forwarded-For: client`` when given."""
    time.sleep(delay)
    headers = {} if client is None else {"X-Forwarded-For": client}
    transport = httpx.HTTPTransport(local_address=local) if local else None
    with httpx.Client(transport=transport) as fresh:
        return fresh.post(f"{url}/v1/validate", json=body, headers=headers, timeout=60)


@pytest.mark.slow
def test_per_client_cap_over_real_connections(server: Any) -> None:
    """Three concurrent requests of one client (behind the trusted proxy): one runs, two get
    429 at once; another client's valid request meanwhile gets its verdict."""
    url = server.url
    answers = at_once(
        [partial(post_as, url, "203.0.113.5", FAULT) for _ in range(3)]
        + [partial(post_as, url, "203.0.113.6", VALID, delay=0.5)]
    )
    statuses = sorted(r.status_code for r in answers[:3])
    assert statuses == [200, 429, 429], [r.text for r in answers[:3]]
    assert all(r.headers["retry-after"] == "1" for r in answers[:3] if r.status_code == 429)
    assert answers[3].status_code == 200 and "findings" in answers[3].json()


@pytest.mark.slow
def test_full_queue_answers_503_over_real_connections(server: Any) -> None:
    """Four clients at once on 2 threads + a queue of 1: three are admitted, one gets 503 with
    Retry-After (not an unbounded wait), /readyz says busy meanwhile and ready after."""
    url = server.url

    def ready_while_full() -> Any:
        time.sleep(1.0)
        return httpx.get(f"{url}/readyz", timeout=30)

    answers = at_once(
        [partial(post_as, url, f"198.51.100.{i}", FAULT) for i in range(4)] + [ready_while_full]
    )
    statuses = sorted(r.status_code for r in answers[:4])
    assert statuses == [200, 200, 200, 503], [r.text for r in answers[:4]]
    full = next(r for r in answers[:4] if r.status_code == 503)
    assert full.headers["retry-after"] == "1" and "in flight" in full.json()["detail"]
    assert answers[4].status_code == 503 and answers[4].json()["status"] == "busy"
    assert httpx.get(f"{url}/readyz", timeout=30).status_code == 200


@pytest.mark.slow
def test_forwarded_for_from_an_untrusted_peer_is_ignored(server: Any) -> None:
    """A peer that is not a trusted proxy (127.0.0.2) cannot pose as many clients."""
    answers = at_once(
        [partial(post_as, server.url, f"192.0.2.{i}", FAULT, "127.0.0.2") for i in range(2)]
    )
    assert sorted(r.status_code for r in answers) == [200, 429]
