"""The web page end to end in a real browser: a real ``cfgcheck serve`` (uvicorn on a free port)
driven by headless Chromium through Selenium. Debian's ``chromium`` and ``chromium-driver``
packages, at /usr/bin/chromium and /usr/bin/chromedriver; nothing is downloaded (the driver's
path is given, so Selenium Manager never runs, and SE_OFFLINE forbids it anyway). Skipped, with
the reason, when Selenium or either binary is missing (``.ci/run`` installs them).

Screenshots go into each test's tmp_path; ``CFGCHECK_UPDATE_SCREENSHOT=1`` also writes the
docs' screenshot (docs/img/web.png).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CONF, REPO
from tests.web_support import GIB, api_finding, line_of, seed_cases

pytestmark = pytest.mark.slow

CHROMIUM = Path(os.environ.get("CFGCHECK_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("CFGCHECK_CHROMEDRIVER", "/usr/bin/chromedriver"))
DOCS_SHOT = REPO / "docs" / "img" / "web.png"
SEEDS = seed_cases()
XSS = "<script>alert(1)</script>"
SERVE = (sys.executable, "-m", "cfgcheck", "serve")
MEMORY = (sys.executable, "-m", "cfgcheck", "memory", "--format", "json")

if not CHROMIUM.is_file() or not CHROMEDRIVER.is_file():
    pytest.skip(
        f"no Chromium here ({CHROMIUM} and {CHROMEDRIVER} are needed: "
        "apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
pytest.importorskip("fastapi", reason="the service extra is not installed")
webdriver = pytest.importorskip(
    "selenium.webdriver", reason="Selenium is not installed: pip install 'cfgcheck[browser]'"
)
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "CFGCHECK_NO_LIVE_GPU": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*SERVE, "--port", str(port), "--config-dir", str(CONF), "--allow-root", str(REPO)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"cfgcheck serve did not start: {log.read_text()[-2000:]}")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _driver(javascript: bool = True) -> Any:
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager may never download anything
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--disable-extensions",
        "--no-first-run",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = _driver()
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: Any, until: Callable[[Any], Any], timeout: float = 30) -> Any:
    return WebDriverWait(driver, timeout).until(until)


def csp_errors(driver: Any) -> list[str]:
    """Console messages about Content-Security-Policy violations since the last call."""
    return [
        e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]
    ]


def paste_and_check(driver: Any, base: str, text: str, **selects: str) -> None:
    """Open the page, paste ``text`` into the config box (as a paste does: the value, then an
    input event), pick ``selects`` and press Check; returns once the result page is there."""
    driver.get(base + "/")
    area = driver.find_element(By.ID, "config")
    driver.execute_script(
        "arguments[0].value = arguments[1];"
        "arguments[0].dispatchEvent(new Event('input', {bubbles: true}));",
        area,
        text,
    )
    for name, value in selects.items():
        driver.execute_script(
            "document.getElementById(arguments[0]).value = arguments[1]", name, value
        )
    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.ID, "submit").click()
    wait(
        driver,
        lambda d: d.find_element(By.TAG_NAME, "html") != old and d.find_elements(By.ID, "summary"),
    )


def api(base: str, text: str) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{base}/v1/validate", text.encode(), {"Content-Type": "application/yaml"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        result: dict[str, Any] = json.load(r)
    return result


def shot(driver: Any, path: Path, full: bool = False) -> None:
    if full:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        width = driver.execute_script("return window.outerWidth")
        driver.set_window_size(width, min(int(height) + 120, 6000))
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 1000


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_seed_failure(browser: Any, server: str, seed: str, tmp_path: Path) -> None:
    text, rule = SEEDS[seed]
    finding = api_finding(api(server, text), rule)
    csp_errors(browser)
    paste_and_check(browser, server, text)
    assert browser.find_element(By.ID, "summary").text.startswith("config has errors")
    item = browser.find_element(
        By.XPATH, f"//li[contains(@class,'finding')][.//code[@class='rule' and text()='{rule}']]"
    )
    # The finding's lines are highlighted in the pasted file, and its location link goes there.
    lines = [n for p in finding["paths"] if (n := line_of(text, p)) is not None]
    assert lines
    for n in lines:
        li = browser.find_element(By.ID, f"L{n}")
        assert "hl-error" in li.get_attribute("class")
    link = item.find_element(By.CSS_SELECTOR, f"a.loc[data-line='{lines[0]}']")
    link.click()
    assert browser.current_url.endswith(f"#L{lines[0]}")
    wait(browser, lambda d: "flash" in d.find_element(By.ID, f"L{lines[0]}").get_attribute("class"))
    # The fix is the CLI's, copyable with one click.
    shown = [c.text for c in item.find_elements(By.CSS_SELECTOR, "code.copyable")]
    expected = [fx["shell"] for fx in finding["fixes"]]
    assert expected and shown == expected
    button = item.find_element(By.CSS_SELECTOR, "button.copy")
    assert button.is_displayed()
    button.click()
    wait(browser, lambda _: button.text == "Copied")
    assert button.get_attribute("data-copied") == expected[0]
    assert csp_errors(browser) == []
    shot(browser, tmp_path / f"{seed}.png", full=True)


def test_switch_gpus_in_the_table(browser: Any, server: str, tmp_path: Path) -> None:
    text, _ = SEEDS["litgpt-cannot-attend"]
    paste_and_check(browser, server, text)
    assert (
        browser.find_element(By.CSS_SELECTOR, "tr.chosen").get_attribute("data-gpu") == "A100-80GB"
    )
    # By keyboard: focus T4's button and press Enter.
    old = browser.find_element(By.TAG_NAME, "html")
    t4 = browser.find_element(By.CSS_SELECTOR, "button.pick[value='T4']")
    browser.execute_script("arguments[0].focus()", t4)
    t4.send_keys(Keys.ENTER)
    wait(browser, lambda d: d.find_element(By.TAG_NAME, "html") != old)
    row = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "tr.chosen"))
    assert row.get_attribute("data-gpu") == "T4"
    assert "does not fit" in row.text
    assert browser.find_element(By.ID, "fixes-title").text == "What makes it fit on T4"
    fixes = browser.find_elements(By.CSS_SELECTOR, ".memfixes code.copyable")
    assert fixes and all("=" in f.text for f in fixes)
    assert "GiB per GPU, fits" in browser.find_element(By.CSS_SELECTOR, ".memfixes").text
    assert browser.find_element(By.ID, "gpu").get_attribute("value") == "T4"
    shot(browser, tmp_path / "t4.png")
    # The shareable link holds the inputs: opening it gives the same page.
    copy_link = browser.find_element(By.CSS_SELECTOR, "button[data-copy-link]")
    copy_link.click()
    wait(browser, lambda _: copy_link.get_attribute("data-copied"))
    link = copy_link.get_attribute("data-copied")
    assert link.startswith(server + "/?") and "gpu=T4" in link
    memfixes = [f.text for f in fixes]
    browser.get(link)
    wait(browser, lambda d: d.find_elements(By.ID, "summary"))
    assert browser.find_element(By.CSS_SELECTOR, "tr.chosen").get_attribute("data-gpu") == "T4"
    shared = browser.find_elements(By.CSS_SELECTOR, ".memfixes code.copyable")
    assert [f.text for f in shared] == memfixes
    # By mouse: H100, where it fits (no fixes to show).
    old = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.CSS_SELECTOR, "button.pick[value='H100']").click()
    wait(browser, lambda d: d.find_element(By.TAG_NAME, "html") != old)
    row = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "tr.chosen"))
    assert row.get_attribute("data-gpu") == "H100" and row.text.endswith("fits")
    assert not browser.find_elements(By.ID, "fixes-title")
    assert "fits" in browser.find_element(By.ID, "verdict").text


def test_stacked_bar_total_is_cfgcheck_memory(browser: Any, server: str, tmp_path: Path) -> None:
    browser.get(server + "/")
    browser.find_element(By.CSS_SELECTOR, "input[name=mode][value=preset]").click()
    assert not browser.find_element(By.ID, "config").is_displayed()  # the other mode hidden
    for name, value in (("model", "llama-3-8b"), ("tokenizer", "llama-3"), ("finetuning", "full")):
        Select(browser.find_element(By.ID, name)).select_by_value(value)
    old = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.ID, "submit").click()
    wait(
        browser,
        lambda d: d.find_element(By.TAG_NAME, "html") != old and d.find_elements(By.ID, "bar"),
    )
    bar = browser.find_element(By.ID, "bar")
    segments = bar.find_elements(By.CSS_SELECTOR, "rect.seg")
    keys = [s.get_attribute("data-key") for s in segments]
    assert {"weights", "gradients", "optimizer_states", "activations", "logits_loss"} <= set(keys)
    assert {"fragmentation", "cuda_context"} <= set(keys)
    total = sum(int(s.get_attribute("data-bytes")) for s in segments)
    assert total == int(bar.get_attribute("data-total-bytes"))
    proc = subprocess.run(
        [*MEMORY, "model=llama-3-8b", "tokenizer=llama-3", "trainer.finetuning=full"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "CFGCHECK_NO_LIVE_GPU": "1"},
        check=False,
    )
    cli = json.loads(proc.stdout)
    assert abs(total / GIB - cli["estimate"]["total_gib"]) < 0.001
    assert browser.find_element(By.ID, "peak").text == f"{total / GIB:.2f} GiB"
    assert cli["verdict"] in browser.find_element(By.ID, "verdict").text
    # Segments are laid side by side, widths in proportion to their bytes.
    widths = [float(s.get_attribute("width")) for s in segments]
    sizes = [int(s.get_attribute("data-bytes")) for s in segments]
    ratios = [(w / widths[0], b / sizes[0]) for w, b in zip(widths, sizes, strict=True)]
    assert all(abs(w - b) <= 0.01 * max(b, 1) for w, b in ratios), ratios
    shot(browser, tmp_path / "bar.png")


def test_script_in_a_value_renders_as_text(browser: Any, server: str, tmp_path: Path) -> None:
    text, _ = SEEDS["litgpt-cannot-attend"]
    text = text.replace("name: tinyllama-alpaca-lora", f"name: '{XSS}'")
    csp_errors(browser)
    paste_and_check(browser, server, text)
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018
    line = line_of(text, "name")
    assert line is not None
    assert XSS in browser.find_element(By.ID, f"L{line}").text
    assert XSS in browser.find_element(By.ID, "config").get_attribute("value")
    scripts = browser.find_elements(By.TAG_NAME, "script")
    assert [s.get_attribute("src") for s in scripts] == [server + "/static/web.js"]
    with urllib.request.urlopen(server + "/", timeout=10) as r:
        csp = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert csp_errors(browser) == []
    shot(browser, tmp_path / "xss.png")


def test_narrow_dark_screen(browser: Any, server: str, tmp_path: Path) -> None:
    text, _ = SEEDS["tinyllama-vocab-size"]
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    browser.set_window_size(360, 800)
    try:
        paste_and_check(browser, server, text, gpu="RTX4090")
        inner = browser.execute_script("return document.documentElement.clientWidth")
        scroll = browser.execute_script("return document.documentElement.scrollWidth")
        assert scroll <= inner, (scroll, inner)  # no sideways scrolling of the page
        rgb = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
        r, g, b = (int(v) for v in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
        assert (r + g + b) / 3 < 60, rgb  # a dark background
        fg = browser.execute_script("return getComputedStyle(document.body).color")
        assert sum(int(v) for v in fg[fg.index("(") + 1 : fg.index(")")].split(",")[:3]) / 3 > 180
        shot(browser, tmp_path / "narrow-dark.png")
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        browser.set_window_size(1280, 1000)


def test_keyboard_reaches_every_control(browser: Any, server: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    browser.get(server + "/")
    seen: list[str] = []
    for _ in range(40):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        active = browser.switch_to.active_element
        seen.append(active.get_attribute("id") or active.get_attribute("class") or active.tag_name)
        if seen[-1] == "submit":
            break
    assert seen[0] == "skip", seen
    order = ["format", "upload", "filename", "config", "gpu", "overrides", "submit"]
    assert [s for s in seen if s in order] == order, seen


def test_docs_screenshot(browser: Any, server: str, tmp_path: Path) -> None:
    """The README's screenshot: a seed failure, the memory panel on an RTX 4090."""
    text, _ = SEEDS["litgpt-cannot-attend"]
    browser.set_window_size(1200, 1400)
    try:
        paste_and_check(browser, server, text, gpu="RTX4090")
        browser.execute_script("document.getElementById('results').scrollIntoView()")
        out = tmp_path / "web.png"
        shot(browser, out)
        if os.environ.get("CFGCHECK_UPDATE_SCREENSHOT"):
            DOCS_SHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out, DOCS_SHOT)
    finally:
        browser.set_window_size(1280, 1000)


def test_upload_a_config_json(browser: Any, server: str, tmp_path: Path) -> None:
    from tests.model_folders import LLAMA2_7B

    upload = tmp_path / "config.json"
    upload.write_text(json.dumps(LLAMA2_7B, indent=2))
    browser.get(server + "/")
    assert not browser.find_element(By.ID, "tokenizer").is_displayed()
    browser.find_element(By.ID, "upload").send_keys(str(upload))
    wait(browser, lambda d: d.find_element(By.ID, "config").get_attribute("value"))
    assert json.loads(browser.find_element(By.ID, "config").get_attribute("value")) == LLAMA2_7B
    assert browser.find_element(By.ID, "format").get_attribute("value") == "hf-config"
    assert browser.find_element(By.ID, "filename").get_attribute("value") == "config.json"
    # A config.json is the model only: the preset's fields are shown for the rest.
    Select(browser.find_element(By.ID, "tokenizer")).select_by_value("llama-2")
    browser.find_element(By.ID, "max_seq_length").send_keys("8192")
    old = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.ID, "submit").click()
    wait(browser, lambda d: d.find_element(By.TAG_NAME, "html") != old)
    wait(browser, lambda d: d.find_elements(By.ID, "summary"))
    line = next(
        n for n, t in enumerate(upload.read_text().split("\n"), 1) if "max_position_embeddings" in t
    )
    assert "hl-error" in browser.find_element(By.ID, f"L{line}").get_attribute("class")
    assert browser.find_element(By.ID, "file-title").text == "config.json"
    shot(browser, tmp_path / "upload.png")


def test_check_works_without_javascript(server: str, tmp_path: Path) -> None:
    driver = _driver(javascript=False)
    try:
        driver.get(server + "/")
        assert not driver.find_element(By.ID, "upload").is_displayed()  # needs the script
        driver.find_element(By.ID, "config").send_keys(
            "model:\n  name: tinyllama-1.1b\n  block_size: 99\n"
        )
        driver.find_element(By.ID, "submit").click()
        wait(driver, lambda d: d.find_elements(By.ID, "summary"))
        assert driver.find_element(By.ID, "summary").text.startswith("config has errors")
        assert driver.find_elements(By.CSS_SELECTOR, "li.finding")
        assert not any(
            b.is_displayed() for b in driver.find_elements(By.CSS_SELECTOR, "button.copy")
        )
        shot(driver, tmp_path / "no-js.png")
    finally:
        driver.quit()
