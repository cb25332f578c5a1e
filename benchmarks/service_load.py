"""Benchmark: the validator service under many concurrent clients on loopback.

    python benchmarks/service_load.py [--clients 32] [--duration 8] [--workers 4]

Starts the real ``cfgcheck serve`` in a subprocess on 127.0.0.1 (a free port), then for each
scenario runs ``--clients`` concurrent httpx clients in one asyncio loop for ``--duration``
seconds, and prints requests/s, p50/p99 latency and the error count (any non-200 answer or
transport error; it must be 0). Scenarios:

* ``body``: a composed run config POSTed as JSON (validation only; the verdict has 1 error).
* ``compose``: ``{"overrides": ["data.max_seq_length=3063"]}`` against the server's conf/;
  after the first request the composition comes from the server's compose cache.
* ``compose-new``: the same with a ``seed=<n>`` override unique to each request, so every
  request is a fresh Hydra composition plus source map (one at a time per process).

The clients run on the same machine as the server, so they share its CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CFGCHECK = shutil.which("cfgcheck")
COMMAND = [CFGCHECK] if CFGCHECK else [sys.executable, "-m", "cfgcheck"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(port: int, workers: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [*COMMAND, "serve", "--port", str(port), "--workers", str(workers)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"cfgcheck serve exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    sys.exit("cfgcheck serve did not come up within 30 s")


async def load(
    url: str, make_body: Callable[[], dict[str, Any]], clients: int, duration: float
) -> dict[str, Any]:
    import httpx

    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        await client.post(url, json=make_body())  # warm-up: imports, first composition
        end = time.perf_counter() + duration

        async def one_client() -> None:
            nonlocal errors
            while time.perf_counter() < end:
                start = time.perf_counter()
                try:
                    r = await client.post(url, json=make_body())
                    ok = r.status_code == 200 and "findings" in r.json()
                except httpx.HTTPError:
                    ok = False
                latencies.append(time.perf_counter() - start)
                errors += not ok

        began = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50": statistics.median(latencies) * 1000,
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "errors": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per scenario")
    parser.add_argument("--workers", type=int, default=4, help="server validation threads")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from cfgcheck import compose
    from cfgcheck.validate import to_plain

    config = to_plain(compose(REPO / "conf", "config", ["data.max_seq_length=3063"]))
    seeds = itertools.count(1000)
    scenarios: dict[str, Callable[[], dict[str, Any]]] = {
        "body": lambda: config,
        "compose": lambda: {"overrides": ["data.max_seq_length=3063"]},
        "compose-new": lambda: {"overrides": ["data.max_seq_length=3063", f"seed={next(seeds)}"]},
    }
    port = free_port()
    server = start_server(port, args.workers)
    try:
        rows = {
            name: asyncio.run(
                load(f"http://127.0.0.1:{port}/v1/validate", body, args.clients, args.duration)
            )
            for name, body in scenarios.items()
        }
    finally:
        server.terminate()
        server.wait(timeout=10)

    print(
        f"cfgcheck serve on 127.0.0.1, {args.clients} concurrent clients, "
        f"{args.duration:g} s per scenario, {args.workers} validation threads; "
        f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()} (clients share the machine)"
    )
    print(f"{'scenario':<12}{'requests':>10}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}")
    for name, r in rows.items():
        print(
            f"{name:<12}{r['requests']:>10}{r['rps']:>10.1f}{r['p50']:>10.1f}"
            f"{r['p99']:>10.1f}{r['errors']:>8}"
        )
    if any(r["errors"] for r in rows.values()):
        sys.exit("errors under load")


if __name__ == "__main__":
    main()
