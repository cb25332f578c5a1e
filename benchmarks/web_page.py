"""Benchmark: how fast the service's web page loads from localhost.

    python benchmarks/web_page.py [--requests 50]

Starts the real ``cfgcheck serve`` in a subprocess on 127.0.0.1 (a free port), then times, one
request at a time over one kept-alive connection:

* ``GET /``: the blank page (what a browser's first paint needs);
* ``GET /static/web.css`` and ``GET /static/web.js``: the only other requests of the page
  (both from the same service: the page loads nothing from another host);
* ``page load``: the three above in sequence, as a browser with an empty cache fetches them;
* ``POST /``: the form with a seed failure (the composed conf/ with data.max_seq_length=3063),
  checked and rendered with its memory panel (the time to a result, not part of page load).

With ``--browser`` (Selenium and Debian's chromium/chromedriver, as the browser tests use
them), also ``browser load``: headless Chromium opening ``/`` with an empty cache, timed by
the page's own Navigation Timing (``loadEventEnd``: the page, its stylesheet and script
fetched, parsed and run).

Prints p50/p90/max milliseconds per item. Loopback only; the client shares the server's CPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _seed_form() -> dict[str, str]:
    import yaml

    from cfgcheck.compose import compose
    from cfgcheck.validate import to_plain

    cfg = to_plain(compose(REPO / "conf", "config", ["data.max_seq_length=3063"]))
    return {"mode": "paste", "format": "cfgcheck", "config": yaml.safe_dump(cfg, sort_keys=False)}


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return (
        f"p50 {statistics.median(ordered) * 1000:6.1f} ms  p90 {p90 * 1000:6.1f} ms  "
        f"max {ordered[-1] * 1000:6.1f} ms"
    )


def _browser_loads(base: str, n: int) -> list[float]:
    """Seconds from navigation start to the end of the load event, ``n`` cold loads of ``/``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    out = []
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
        driver.get(base + "/")  # warm-up
        for _ in range(n):
            driver.get(base + "/")
            ms = driver.execute_script(
                "const e = performance.getEntriesByType('navigation')[0];"
                "return e.loadEventEnd - e.startTime;"
            )
            out.append(float(ms) / 1000)
    finally:
        driver.quit()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=50, help="timed requests per item")
    parser.add_argument("--browser", action="store_true", help="also time headless Chromium")
    args = parser.parse_args()

    import httpx

    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "CFGCHECK_NO_LIVE_GPU": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "cfgcheck", "serve", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=60) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    print("cfgcheck serve did not start", file=sys.stderr)
                    return 1
                time.sleep(0.2)
            form = _seed_form()
            items = {"GET /": "/", "GET /static/web.css": "/static/web.css"}
            items["GET /static/web.js"] = "/static/web.js"
            times: dict[str, list[float]] = {name: [] for name in [*items, "page load", "POST /"]}
            for path in items.values():  # warm-up
                client.get(path).raise_for_status()
            client.post("/", data=form).raise_for_status()
            for _ in range(args.requests):
                load = 0.0
                for name, path in items.items():
                    start = time.perf_counter()
                    client.get(path).raise_for_status()
                    took = time.perf_counter() - start
                    times[name].append(took)
                    load += took
                times["page load"].append(load)
                start = time.perf_counter()
                client.post("/", data=form).raise_for_status()
                times["POST /"].append(time.perf_counter() - start)
        if args.browser:
            times["browser load"] = _browser_loads(base, args.requests)
    finally:
        server.terminate()
        server.wait(10)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"{args.requests} requests per item"
    )
    for name, samples in times.items():
        print(f"{name:<20} {_ms(samples)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
