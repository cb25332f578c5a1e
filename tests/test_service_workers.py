"""``cfgcheck serve --workers 2``: two real worker processes behind one socket, probed over
real HTTP (security refusals, a valid verdict byte for byte the CLI's, health and readiness),
then SIGTERM: a request in flight is still answered and every process exits cleanly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.conftest import COMMAND, REPO  # noqa: E402

pytestmark = pytest.mark.slow  # two workers each import torch/transformers at start-up
SECRET = "workers-s3cr3t-never-sent"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker_pids(parent: int) -> set[int]:
    """The parent's children started by multiprocessing's spawn (not its resource tracker)."""
    pids = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = next(
                int(line.split()[1])
                for line in status.read_text().splitlines()
                if line.startswith("PPid:")
            )
            cmdline = (status.parent / "cmdline").read_bytes()
        except (OSError, StopIteration):
            continue
        if ppid == parent and b"spawn_main" in cmdline:
            pids.add(int(status.parent.name))
    return pids


class Server:
    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.out: str | None = None  # what it printed, once stopped


def start(port: int, *options: str, workers: int = 2, env: dict[str, str] | None = None) -> Server:
    """``cfgcheck serve --workers WORKERS ... OPTIONS`` on ``port``, once every worker answers."""
    proc = subprocess.Popen(
        [
            *COMMAND,
            "serve",
            "--workers",
            str(workers),
            "--port",
            str(port),
            "--header-timeout",
            "5",
            *options,
        ],
        cwd=REPO,
        env={**os.environ, "CFGCHECK_WORKERS_SECRET": SECRET, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = Server(proc, port)
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            pytest.fail(f"cfgcheck serve exited {proc.returncode}: {proc.stdout.read()}")  # type: ignore[union-attr]
        try:
            if httpx.get(f"{server.url}/readyz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"cfgcheck serve --workers {workers} was not ready within 120 s")
        time.sleep(0.3)
    # Every worker ready: each answers only after its own start-up (imports, preload).
    while len(worker_pids(proc.pid)) < workers and time.monotonic() < deadline:
        time.sleep(0.3)
    return server


def stop(server: Server) -> str:
    """SIGTERM, then everything the server printed (once stopped, the same text again)."""
    if server.out is not None:
        return server.out
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
    try:
        out, _ = server.proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        out, _ = server.proc.communicate()
        pytest.fail(f"cfgcheck serve did not exit within 60 s of SIGTERM: {out}")
    server.out = out
    return out


@pytest.fixture(scope="module")
def servers() -> Iterator[list[Server]]:
    """The servers this module started (a start costs two workers' imports), each stopped at
    the end and its output checked."""
    started: list[Server] = []
    yield started
    for s in started:
        out = stop(s)
        assert "Traceback" not in out, out


@pytest.fixture
def server(servers: list[Server]) -> Server:
    """The module's running server; a new one where the last was stopped (the SIGTERM test,
    last in this file, stops it)."""
    if not servers or servers[-1].proc.poll() is not None:
        servers.append(start(free_port()))
    return servers[-1]


def test_two_worker_processes_answer_health(server: Server) -> None:
    workers = worker_pids(server.proc.pid)
    assert len(workers) == 2, workers
    seen = set()
    for _ in range(20):
        with httpx.Client() as fresh:  # a new connection each time: any worker may accept it
            health = fresh.get(f"{server.url}/healthz", timeout=10)
            ready = fresh.get(f"{server.url}/readyz", timeout=10)
        assert health.status_code == ready.status_code == 200
        assert health.headers["content-type"] == "application/json"
        assert health.json()["status"] == "ok" and ready.json()["status"] == "ready"
        seen |= {health.json()["pid"], ready.json()["pid"]}
    assert seen <= workers  # the parent only supervises; workers answer


def test_valid_request_is_the_cli_verdict(server: Server) -> None:
    overrides = ["data.max_seq_length=3063"]
    cli = subprocess.run(
        [*COMMAND, "check", "--format", "json", *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    for _ in range(4):  # over fresh connections, so both workers are likely to serve one
        with httpx.Client() as fresh:
            r = fresh.post(f"{server.url}/v1/validate", json={"overrides": overrides}, timeout=60)
        assert r.status_code == 200
        assert r.text == cli.stdout


@pytest.mark.parametrize(
    ("body", "status", "phrase"),
    [
        ({"overrides": ["name=${oc.env:CFGCHECK_WORKERS_SECRET}"]}, 422, "interpolation"),
        ({"overrides": ["model=../../secret"]}, 422, "must name a file under model/"),
        ({"overrides": ["hydra.searchpath=[file:///tmp]"]}, 422, "hydra.*"),
        ({"overrides": ["data.max_seq_length=1024,2048"]}, 422, "sweeps"),
        ({"overrides": ["+tokenizer.path=/etc"]}, 422, "/etc"),
    ],
)
def test_security_refusals_hold_in_every_worker(
    server: Server, body: dict[str, list[str]], status: int, phrase: str
) -> None:
    for _ in range(3):
        with httpx.Client() as fresh:
            r = fresh.post(f"{server.url}/v1/validate", json=body, timeout=60)
        assert r.status_code == status, r.text
        assert phrase in r.json()["detail"]
        assert SECRET not in r.text


def test_malformed_and_oversized_bodies(server: Server) -> None:
    bad = httpx.post(
        f"{server.url}/v1/validate",
        content=b"{not json",
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert bad.status_code == 400
    big = httpx.post(
        f"{server.url}/v1/validate",
        content=b" " * 1_100_000,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert big.status_code == 413


def test_the_dockerfiles_healthcheck_passes_against_a_real_server(server: Server) -> None:
    from tests.test_dockerfile import healthcheck_command

    argv = [a.replace(":8000/", f":{server.port}/") for a in healthcheck_command()]
    argv[0] = sys.executable
    assert subprocess.run(argv, timeout=30, check=False).returncode == 0
    closed = [a.replace(f":{server.port}/", f":{free_port()}/") for a in argv]
    assert subprocess.run(closed, capture_output=True, timeout=30, check=False).returncode != 0


@pytest.mark.parametrize(
    ("option", "phrase"),
    [
        (["--workers", "0"], "--workers must be at least 1"),
        (["--threads", "0"], "--threads"),
        (["--max-per-client", "0"], "--max-per-client must be at least 1"),
        (["--max-queue", "-1"], "--max-queue must be 0 or more"),
        (["--timeout", "10", "--hard-timeout", "5"], "--hard-timeout=5 must be longer"),
        (["--trusted-proxy", "proxy.internal"], "not an IP address"),
    ],
)
def test_worker_and_thread_counts_are_checked(option: list[str], phrase: str) -> None:
    proc = subprocess.run(
        [*COMMAND, "serve", *option, "--port", str(free_port())],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert phrase in proc.stderr and "Traceback" not in proc.stderr


def test_sigterm_drains_a_request_in_flight(server: Server) -> None:
    """The module's server, which the tests above have used (last in this file: it stops it)."""
    s = server
    body = json.dumps({"overrides": ["data.max_seq_length=3063"]}).encode()
    head = (
        f"POST /v1/validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    try:
        conn = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        conn.sendall(head + body[:10])  # in flight: the head and part of the body
        time.sleep(0.5)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        # Draining: the workers stop accepting, no new request is served ...
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{s.url}/healthz", timeout=5)
        # ... while the request in flight is answered in full.
        conn.sendall(body[10:])
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
        conn.close()
    finally:
        out = stop(s)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    verdict = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert verdict["ok"] is False
    assert s.proc.returncode == 0, out
    assert "Traceback" not in out, out
    assert "Stopping parent process" in out
