"""Benchmark: the validator service under many concurrent clients on loopback.

    python benchmarks/service_load.py [--clients 32] [--duration 8] [--workers 1,CORES]
                                      [--threads 4] [--quick]

Starts the real ``cfgcheck serve --workers N`` in a subprocess on 127.0.0.1 (a free port), for
each N of ``--workers`` (default: 1 and the number of cores), then for each scenario runs
``--clients`` concurrent httpx clients in one asyncio loop for ``--duration`` seconds, and
prints requests/s, p50/p99 latency and the error count (any non-200 answer or transport
error; it must be 0), each worker count side by side, with the ratio of the last one's
requests/s to the first one's (a markdown table: ``scripts/check-figures.py`` compares its
ratios with the ones the docs quote). ``--quick``: 16 clients, 3 s per scenario. Scenarios:

* ``body``: a composed run config POSTed as JSON (validation only; the verdict has 1 error).
* ``compose``: ``{"overrides": ["data.max_seq_length=3063"]}`` against the server's conf/;
  after the first request the composition comes from the server's compose cache.
* ``compose-new``: the same with a ``seed=<n>`` override unique to each request, so every
  request is a fresh Hydra composition plus source map (one at a time per process).
* ``adversarial``: ``--attackers`` of the clients send expensive hostile bodies in a loop
  (900 KB of ``${a}``, a nested interpolation, a 60 KB ``- - - ...`` nesting body, an alias
  bomb, 40 KB list overrides, a 100k-key body, a 310-digit integer), the others send the
  ``body`` scenario's valid config. Reported: the *valid* requests' rate, p50/p99 latency and
  errors (any non-200), and what the attack requests were answered (status counts).
  ``--attacks`` picks the hostile bodies; ``--repo DIR`` serves another checkout (e.g. the
  tree before a fix) for before/after figures.
* ``attackers`` (issue 25): one row per hostile *class* (huge integers, interpolations,
  oversized and non-regular files, links to outside files, control characters, 19,000 unknown
  keys, 128 long list overrides, ``Expect: 100-continue`` with no body, one client opening
  many connections, a request stuck in one C call with the GIL released and with it held):
  ``--attackers`` clients send that class in a loop while the others send the valid config;
  the valid requests' p99 is compared with the idle figure (no attackers, measured first):
  the goal is within 2x. The server runs in a scratch project (a copy of conf/, the hostile
  files, a secret outside it that must never appear in a reply) with the test-only
  ``CFGCHECK_FAULT_INJECTION=1`` (:mod:`cfgcheck.service.faults`: the stuck C call); the
  rows that get workers killed run last, each twice (the second time, the same attackers are
  refused: their requests got workers killed), and each row starts once every worker is up.
  ``--scenarios attackers`` runs it alone; ``--serve-option`` passes options to the server.

Every client connects from a loopback address of its own (127.0.G.N: Linux routes all of
127/8 to the loopback interface), so the server's per-client cap counts each apart, as it
would count real clients. The clients run on the same machine as the server, so they share
its CPU. Loopback only; every loop ends after ``--duration`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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


def address(group: int, index: int) -> str:
    """A loopback address of its own for client ``index`` of ``group`` (Linux routes all of
    127/8 to the loopback interface): the server's per-client cap (``--max-per-client``)
    counts each client apart, as it counts real clients."""
    return f"127.0.{group}.{10 + index % 240}"


def client_at(local: str, connections: int = 1, timeout: float = 30) -> Any:
    """An ``httpx.AsyncClient`` whose connections come from ``local``."""
    import httpx

    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    transport = httpx.AsyncHTTPTransport(local_address=local, limits=limits)
    return httpx.AsyncClient(transport=transport, timeout=timeout)


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def start_server(
    port: int,
    workers: int,
    repo: Path = REPO,
    threads: int = 4,
    timeout: float = 10.0,
    cwd: Path | None = None,
    extra: tuple[str, ...] = (),
    env_extra: dict[str, str] | None = None,
    stdout: Any = None,
) -> subprocess.Popen[bytes]:
    """``cfgcheck serve --workers WORKERS --threads THREADS --timeout TIMEOUT EXTRA...``, once
    every worker answers."""
    env = {**os.environ, "PYTHONPATH": str(repo), **(env_extra or {})}
    command = [sys.executable, "-m", "cfgcheck", "serve", "--port", str(port)]
    command += ["--workers", str(workers), "--threads", str(threads), "--timeout", str(timeout)]
    command += extra
    proc = subprocess.Popen(
        command,
        cwd=cwd or repo,
        env=env,
        stdout=subprocess.DEVNULL if stdout is None else stdout,
        stderr=subprocess.DEVNULL if stdout is None else subprocess.STDOUT,
    )
    import httpx

    deadline = time.monotonic() + 60 * workers
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"cfgcheck serve exited with {proc.returncode}")
        try:
            up = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            # every worker started (each answers only once its start-up is done)
            if up and (workers == 1 or len(answering(port, workers)) == workers):
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit(f"cfgcheck serve did not come up within {60 * workers} s")


def settle(port: int, workers: int, within: float = 300) -> None:
    """Wait until ``workers`` distinct workers answer ``/readyz`` (a killed one replaced)."""
    import httpx

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        pids = set()
        for _ in range(8 * workers):
            with contextlib.suppress(httpx.HTTPError), httpx.Client() as fresh:
                r = fresh.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
                if r.status_code == 200:
                    pids.add(r.json().get("pid"))
            if len(pids) >= workers:
                return
        time.sleep(1)


def answering(port: int, workers: int) -> set[int]:
    """The worker pids that answer ``/healthz`` over fresh connections."""
    import httpx

    pids = set()
    for _ in range(8 * workers):
        with httpx.Client() as fresh:
            pid = fresh.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json().get("pid")
        if pid is None:  # a checkout (--repo) from before worker processes: threads only
            return set(range(workers))
        pids.add(pid)
        if len(pids) == workers:
            break
    return pids


class Valid:
    """Valid clients' requests: each one's latency, and how many failed (not a 200 with
    findings, or no answer)."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0

    async def send(
        self, client: Any, url: str, make_body: Callable[[], dict[str, Any]], end: float
    ) -> None:
        """Post ``make_body()`` from ``client`` in a loop until ``end`` (perf_counter)."""
        import httpx

        while time.perf_counter() < end:
            start = time.perf_counter()
            try:
                r = await client.post(url, json=make_body())
                ok = r.status_code == 200 and "findings" in r.json()
            except httpx.HTTPError:
                ok = False
            self.latencies.append(time.perf_counter() - start)
            self.errors += not ok

    def stats(self, elapsed: float) -> dict[str, Any]:
        """Requests, rate, p50/p99 ms (NaN when none was answered) and errors."""
        lat = sorted(self.latencies)
        return {
            "requests": len(lat),
            "rps": len(lat) / elapsed,
            "p50": statistics.median(lat) * 1000 if lat else float("nan"),
            "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else float("nan"),
            "errors": self.errors,
        }


async def load(
    url: str, make_body: Callable[[], dict[str, Any]], clients: int, duration: float
) -> dict[str, Any]:

    valid = Valid()
    async with contextlib.AsyncExitStack() as stack:
        each = [await stack.enter_async_context(client_at(address(0, i))) for i in range(clients)]
        await each[0].post(url, json=make_body())  # warm-up: imports, first composition
        end = time.perf_counter() + duration

        began = time.perf_counter()
        await asyncio.gather(*(valid.send(c, url, make_body, end) for c in each))
        elapsed = time.perf_counter() - began
    return valid.stats(elapsed)


def attack_bodies() -> dict[str, tuple[bytes, str]]:
    """Hostile bodies by name: (bytes, content type). Each is under the 1 MB body limit."""
    import json

    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    bomb += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    as_json = "application/json"
    return {
        "interp-900k": (json.dumps({"name": "${a}" * 225_000}).encode(), as_json),
        "interp-nested": (json.dumps({"name": "${" * 300 + "a" + "}" * 300}).encode(), as_json),
        "block-nest-60k": (("- " * 30_000 + "1").encode(), "application/yaml"),
        "alias-bomb": ("\n".join(bomb).encode(), "application/yaml"),
        "list-override-40k": (
            json.dumps({"overrides": ["data.paths=[" + ",".join(["ab"] * 13_000) + "]"]}).encode(),
            as_json,
        ),
        "100k-keys": (json.dumps({f"k{i}": i for i in range(60_000)}).encode(), as_json),
        "int-310": (b'{"model": {"block_size": ' + b"9" * 310 + b"}}", as_json),
    }


async def adversarial(
    url: str,
    valid: dict[str, Any],
    attacks: dict[str, tuple[bytes, str]],
    clients: int,
    attackers: int,
    duration: float,
) -> dict[str, Any]:
    """Valid clients and attackers at once; latency and errors of the valid requests."""
    import httpx

    good = Valid()
    answered: dict[str, int] = {}
    async with contextlib.AsyncExitStack() as stack:
        each = [await stack.enter_async_context(client_at(address(0, i))) for i in range(clients)]
        await each[0].post(url, json=valid)  # warm-up
        end = time.perf_counter() + duration
        payloads = list(attacks.values())

        async def bad(offset: int, client: httpx.AsyncClient) -> None:
            for i in itertools.count(offset):
                if time.perf_counter() >= end:
                    return
                body, content_type = payloads[i % len(payloads)]
                try:
                    r = await client.post(url, content=body, headers={"content-type": content_type})
                    key = str(r.status_code)
                except httpx.HTTPError as e:
                    key = type(e).__name__
                answered[key] = answered.get(key, 0) + 1

        began = time.perf_counter()
        await asyncio.gather(
            *(good.send(c, url, lambda: valid, end) for c in each[attackers:]),
            *(bad(i, c) for i, c in enumerate(each[:attackers])),
        )
        elapsed = time.perf_counter() - began
    return {
        **good.stats(elapsed),
        "attacks": answered,
    }


SECRET = "SECRET-benchmark-outside-content"
# Connections each attacker opens in the ``many-conns`` row (all from one address).
MANY = 8
# Rows whose attacks get workers killed (the test-only fault injection of
# cfgcheck.service.faults): run last, each attacker from an address of its own.
KILLING = ("slow-c-call", "stuck-c-call")


def attacker_classes(project: Path, config: dict[str, Any]) -> dict[str, list[Any]]:
    """Hostile requests by class: JSON bodies (dicts), or ``"expect-100"`` (a raw request
    announcing a body it never sends). Files are created in ``project`` (the server's root)
    and a secret beside it."""
    import copy
    import json

    outside = project.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.json").write_text(json.dumps({"name": SECRET}))
    (project / "link.json").symlink_to(outside / "secret.json")
    (project / "linked").mkdir()
    (project / "linked" / "config.json").symlink_to(outside / "secret.json")
    with (project / "big.json").open("wb") as f:
        f.truncate(2_500_000_000)
    os.mkfifo(project / "pipe.json")

    def with_(section: str, key: str, value: Any) -> dict[str, Any]:
        body = copy.deepcopy(config)
        (body.setdefault(section, {}) if section else body)[key] = value
        return body

    big = 2**63 - 1
    unknown = copy.deepcopy(config)
    unknown["model"].update({f"unknown_key_{i}": i for i in range(19_000)})
    nested = {
        "name": ["${a" + str(i) + "}" for i in range(10)],
        **{f"a{i}": ["${b}"] * 10 for i in range(10)},
    }
    return {
        # Not an attack: the attackers send the valid config too. The load they add to a box
        # whose cores the clients share, for comparison with the rows below.
        "(4 more valid)": [config],
        "huge-int": [
            with_("model", k, big) for k in ("n_layer", "d_model", "vocab_size", "block_size")
        ]
        + [with_("trainer", "micro_batch_size", big)],
        "interpolation": [
            {**config, **nested},
            with_("data", "template", "${" * 300 + "a" + "}" * 300),
        ],
        "file": [
            with_("tokenizer", "path", p)
            for p in ("big.json", "pipe.json", "/proc/self/pagemap", "/dev/zero")
        ],
        "outside-link": [
            with_("tokenizer", "path", "link.json"),
            with_("model", "pretrained", "linked"),
        ],
        "control": [
            with_("tokenizer", "path", "a\x00b\n::error::%0A"),
            with_("", "name", "\x1b[2J\r\n::error::"),
            with_("tokenizer", "path", "\ud800"),
        ],
        "unknown-keys": [unknown],
        "overrides-128": [
            {"overrides": [f"+x{i}=[" + ",".join(["ab"] * 330) + "]" for i in range(128)]}
        ],
        "expect-100": ["expect-100"],
        # One client (one address) opening many connections: the per-client cap answers 429.
        "many-conns": ["many-connections"],
        # A request inside one long C call (CFGCHECK_FAULT_INJECTION=1, test-only): the GIL
        # released (the worker answers 504, drains, and is killed at the hard limit), then
        # held (the whole worker stops until the supervisor kills it at the hard limit).
        "slow-c-call": [{"cfgcheck-fault": {"release-gil": 600}}],
        "stuck-c-call": [{"cfgcheck-fault": {"hold-gil": 600}}],
    }


async def attacked(
    url: str,
    valid: dict[str, Any],
    payloads: list[Any],
    clients: int,
    attackers: int,
    duration: float,
    group: int = 1,
) -> dict[str, Any]:
    """Valid clients and ``attackers`` sending ``payloads`` round-robin; valid latencies.

    Every client has a loopback address of its own (:func:`address`): the valid ones in
    127.0.0.x, the attackers in 127.0.GROUP.x. The payload ``"many-connections"``: the
    attackers are one client instead (one address), each opening :data:`MANY` connections
    that send the valid config in a loop."""
    import json
    from urllib.parse import urlsplit

    import httpx

    good = Valid()
    answered: dict[str, int] = {}
    leaked = False
    parts = urlsplit(url)
    many = payloads == ["many-connections"]

    async def expect_100() -> str:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        writer.write(
            f"POST {parts.path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Expect: 100-continue\r\nContent-Length: 500\r\n\r\n".encode()
        )
        await writer.drain()
        try:
            data = await asyncio.wait_for(reader.read(), timeout=duration + 15)
        except TimeoutError:
            data = b"held"
        writer.close()
        answers = [line.split()[1] for line in data.split(b"\r\n") if line.startswith(b"HTTP/1.1")]
        return "/".join(a.decode() for a in answers) or "closed"

    # Encoded once (ASCII: a lone surrogate escaped), so the attackers' serialization does not
    # block the event loop the valid clients' timings run in.
    if many:
        payloads = [valid]
    encoded = {id(p): json.dumps(p).encode() for p in payloads if p != "expect-100"}
    kind = "application/json"
    async with contextlib.AsyncExitStack() as stack:
        goods = [
            await stack.enter_async_context(client_at(address(0, i), timeout=60))
            for i in range(clients - attackers)
        ]
        if many:
            one = await stack.enter_async_context(
                client_at(address(group, 0), attackers * MANY, timeout=60)
            )
            bads = [one] * (attackers * MANY)
        else:
            bads = [
                await stack.enter_async_context(client_at(address(group, i), timeout=60))
                for i in range(attackers)
            ]
        if goods:  # warm-up (a worker replaced after the last row may drop it: not timed)
            with contextlib.suppress(httpx.HTTPError):
                await goods[0].post(url, json=valid)
        end = time.perf_counter() + duration

        async def bad(offset: int, client: httpx.AsyncClient) -> None:
            nonlocal leaked
            for i in itertools.count(offset):
                if time.perf_counter() >= end:
                    return
                payload = payloads[i % len(payloads)]
                try:
                    if payload == "expect-100":
                        key = await expect_100()
                    else:
                        r = await client.post(
                            url, content=encoded[id(payload)], headers={"content-type": kind}
                        )
                        key = str(r.status_code)
                        leaked = leaked or SECRET in r.text
                except httpx.HTTPError as e:
                    key = type(e).__name__
                answered[key] = answered.get(key, 0) + 1

        began = time.perf_counter()
        await asyncio.gather(
            *(good.send(c, url, lambda: valid, end) for c in goods),
            *(bad(i, c) for i, c in enumerate(bads)),
        )
        elapsed = time.perf_counter() - began
    return {
        **good.stats(elapsed),
        "attacks": answered,
        "leaked": leaked,
    }


def run_attackers(args: argparse.Namespace, config: dict[str, Any], workers: int) -> bool:
    """The ``attackers`` table; True when every class kept p99 within 2x and nothing leaked."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="cfgcheck-attack-") as tmp:
        project = Path(tmp) / "project"
        shutil.copytree(REPO / "conf", project / "conf")
        classes = attacker_classes(project, config)
        if args.attacks != "all":
            classes = {k: v for k, v in classes.items() if k in args.attacks.split(",")}
        # the rows that kill workers last, so that no other row runs during a respawn
        classes = dict(sorted(classes.items(), key=lambda kv: kv[0] in KILLING))
        port = free_port()
        log = Path(tmp) / "serve.log"
        with log.open("wb") as out:
            server = start_server(
                port,
                workers,
                args.repo.resolve(),
                args.threads,
                args.server_timeout,
                cwd=project,
                extra=tuple(args.serve_option),
                env_extra={"CFGCHECK_FAULT_INJECTION": "1"},
                stdout=out,
            )
        url = f"http://127.0.0.1:{port}/v1/validate"
        try:
            idle = asyncio.run(
                attacked(url, config, [], args.clients - args.attackers, 0, args.duration)
            )
            rows = {}
            for group, (name, payloads) in enumerate(classes.items(), start=1):
                # A row that killed workers runs again once they are replaced: the same
                # attackers, now refused by every worker (the supervisor's offenders table).
                for row in (name, f"{name} again") if name in KILLING else (name,):
                    settle(port, workers)  # every worker up (after a row that killed one)
                    rows[row] = asyncio.run(
                        attacked(
                            url,
                            config,
                            payloads,
                            args.clients,
                            args.attackers,
                            args.duration,
                            group,
                        )
                    )
            alive = server.poll() is None
        finally:
            server.terminate()
            server.wait(timeout=60)
        events = [
            line.strip()
            for line in log.read_text(errors="replace").splitlines()
            if "killed:" in line or "died" in line or "draining:" in line
        ]
        kills = sum("past the hard limit" in line for line in events)
    print(
        f"attackers: {args.clients - args.attackers} valid clients (+{args.attackers} attackers "
        f"per class), {args.duration:g} s per row, {workers} worker(s) of {args.threads} "
        f"validation threads; load average {os.getloadavg()[0]:.1f}; "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()} (clients share the machine)"
    )
    print(
        f"{'class':<15}{'valid req':>10}{'p50 ms':>9}{'p99 ms':>9}{'x idle':>8}{'errors':>7}"
        "  answers"
    )
    print(
        f"{'(idle)':<15}{idle['requests']:>10}{idle['p50']:>9.1f}{idle['p99']:>9.1f}{1.0:>8.2f}{idle['errors']:>7}"
    )
    good = alive and not idle["errors"]
    for name, r in rows.items():
        ratio = r["p99"] / idle["p99"]
        good = good and ratio <= 2 and not r["errors"] and not r["leaked"]
        answers = ", ".join(f"{k}: {v}" for k, v in sorted(r["attacks"].items()))
        leak = "  LEAKED" if r["leaked"] else ""
        print(
            f"{name:<15}{r['requests']:>10}{r['p50']:>9.1f}{r['p99']:>9.1f}{ratio:>8.2f}"
            f"{r['errors']:>7}  {answers}{leak}"
        )
    print(
        f"server {'alive' if alive else 'DEAD'} after the run; {kills} worker(s) killed at the "
        "hard limit and replaced; goal: valid p99 within 2x idle"
    )
    for line in events:  # what the server logged about its workers
        print(f"  server: {line}")
    return good


def run_scenarios(
    args: argparse.Namespace,
    workers: int,
    scenarios: dict[str, Callable[[], dict[str, Any]]],
    chosen: set[str],
    adversarial_run: Callable[[str], dict[str, Any]] | None,
) -> dict[str, dict[str, Any]]:
    """Every chosen scenario against one ``cfgcheck serve --workers WORKERS``."""
    port = free_port()
    # Throughput, not admission: the queue holds every client (past --max-queue the server
    # answers 503 at once, and those fast refusals would count as served requests).
    queue = ("--max-queue", str(max(args.clients, 16)))
    server = start_server(
        port, workers, args.repo.resolve(), args.threads, args.server_timeout, extra=queue
    )
    url = f"http://127.0.0.1:{port}/v1/validate"
    try:
        rows = {
            name: asyncio.run(load(url, body, args.clients, args.duration))
            for name, body in scenarios.items()
            if name in chosen
        }
        if adversarial_run is not None:
            rows["adversarial"] = adversarial_run(url)
            rows["adversarial"]["alive"] = server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=60)
    return rows


def print_side_by_side(counts: list[int], runs: dict[int, dict[str, dict[str, Any]]]) -> None:
    """One markdown row per scenario: each worker count's req/s, p50/p99 ms and errors, then the
    ratio of the last count's req/s to the first's (the figure the docs quote)."""
    first, last = counts[0], counts[-1]
    head = ["scenario"]
    for n in counts:
        w = f"{n} worker{'s' if n > 1 else ''}"
        head += [f"{w} req/s", f"{w} p50 ms", f"{w} p99 ms", f"{w} errors"]
    if len(counts) > 1:
        head.append(f"{last} vs {first} req/s")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for name in runs[first]:
        cells = [f"`{name}`"]
        for n in counts:
            r = runs[n][name]
            cells += [f"{r['rps']:.1f}", f"{r['p50']:.0f}", f"{r['p99']:.0f}", str(r["errors"])]
        if len(counts) > 1:
            cells.append(f"{runs[last][name]['rps'] / runs[first][name]['rps']:.2f}x")
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per scenario")
    parser.add_argument(
        "--workers",
        default=f"1,{cores()}",
        help="comma-separated worker process counts to compare (default: 1 and the cores)",
    )
    parser.add_argument("--threads", type=int, default=4, help="validation threads per worker")
    parser.add_argument("--quick", action="store_true", help="16 clients, 3 s per scenario")
    parser.add_argument(
        "--server-timeout",
        type=float,
        default=10.0,
        help="the server's --timeout (default 10, the server's own; raise it on a loaded "
        "machine, where compose-new requests queue past 10 s and are answered 504)",
    )
    parser.add_argument(
        "--attackers", type=int, default=4, help="clients sending hostile bodies (adversarial)"
    )
    parser.add_argument(
        "--attacks",
        default="all",
        help="comma-separated hostile bodies for the adversarial scenario (default: all of "
        + ", ".join(attack_bodies())
        + ")",
    )
    parser.add_argument(
        "--scenarios", default="body,compose,compose-new,adversarial", help="which to run"
    )
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout to serve")
    parser.add_argument(
        "--serve-option",
        action="append",
        default=[],
        metavar="ARG",
        help="an argument for cfgcheck serve (attackers), e.g. --serve-option=--hard-timeout=8",
    )
    args = parser.parse_args()
    if args.quick:
        args.clients, args.duration = 16, 3.0
    counts = sorted({int(n) for n in args.workers.split(",")})
    chosen = set(args.scenarios.split(","))
    attacks = attack_bodies()
    if args.attacks != "all":
        attacks = {k: v for k, v in attacks.items() if k in args.attacks.split(",")}

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
    if chosen == {"attackers"}:
        if not run_attackers(args, config, counts[-1]):
            sys.exit("an attack class slowed valid clients past 2x, failed them or leaked")
        return

    def adversarial_run(url: str) -> dict[str, Any]:
        return asyncio.run(
            adversarial(url, config, attacks, args.clients, args.attackers, args.duration)
        )

    runs = {
        n: run_scenarios(
            args,
            n,
            scenarios,
            chosen,
            adversarial_run if "adversarial" in chosen and n == counts[-1] else None,
        )
        for n in counts
    }
    print(
        f"cfgcheck serve on 127.0.0.1, {args.clients} concurrent clients, "
        f"{args.duration:g} s per scenario, {args.threads} validation threads per worker, "
        f"--timeout {args.server_timeout:g}; "
        f"{cores()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f} "
        "(clients share the machine)"
    )
    print()
    plain = {n: {k: v for k, v in rows.items() if k != "adversarial"} for n, rows in runs.items()}
    if plain[counts[0]]:
        print_side_by_side(counts, plain)
    rows = runs[counts[-1]]
    if "adversarial" in rows:
        r = rows["adversarial"]
        total = max(r["requests"], 1)
        print()
        print(
            f"adversarial ({counts[-1]} workers): {args.clients - args.attackers} valid clients, "
            f"{args.attackers} attackers ({', '.join(attacks)}); valid {r['rps']:.1f} req/s, "
            f"p50 {r['p50']:.0f} ms, p99 {r['p99']:.0f} ms, error rate {r['errors'] / total:.1%}; "
            f"attack answers {dict(sorted(r['attacks'].items()))}; server "
            f"{'alive' if r['alive'] else 'DEAD'} after the run"
        )
    if "attackers" in chosen and not run_attackers(args, config, counts[-1]):
        sys.exit("an attack class slowed valid clients past 2x, failed them or leaked")
    if any(r["errors"] for rows in runs.values() for r in rows.values()):
        sys.exit("errors under load")


if __name__ == "__main__":
    main()
