"""Issue 25, item 7: a property-based suite that owns the hostile *classes*, on every entry point.

Classes (each a hypothesis strategy drawing its own instances):

- ``huge-int``: a legal integer far past any real model (up to int64 max) in a size field;
- ``interpolation``: nested list interpolations (``width ** levels`` values, 10^6 to 10^12);
- ``file``: an oversized sparse file, a FIFO, a ``/proc`` file, a device, a folder, as the
  file a field names;
- ``outside-link``: a symlink inside the project to a file outside it holding a secret;
- ``control``: control characters (and a lone surrogate where JSON can carry one) in a string
  field.

Entry points: ``check``, ``memory``, ``data``, ``hook``, the service (a composed body, in a
subprocess through FastAPI's TestClient), and ``--from`` each native format (litgpt, axolotl,
trl, torchtune, llamafactory, python, launch). Every case runs in a fresh process under
RLIMIT_AS and a timeout (:mod:`tests.bounded`) and must end there: a verdict (exit 0 or 1)
or one line and exit 2 on the CLI, a 200 or a 4xx from the service, never a traceback, a 5xx
or a byte of the secret planted outside the project.

One example per (entry point, class) by default; ``CFGCHECK_FUZZ_CLASS_EXAMPLES=N`` draws N (the
slow entry points run under ``-m slow``). The service cases run against the JSON API and the
web page's form alike (:data:`SERVICE_ENDPOINTS`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.bounded import SECRET, Ended, plant, run_bounded, sparse
from tests.conftest import CONF, REPO
from tests.sources.support import example

EXAMPLES = max(1, int(os.environ.get("CFGCHECK_FUZZ_CLASS_EXAMPLES", "1")))
CASES = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
GB = 1 << 30
DEMO_TOKENIZER = REPO / "assets" / "demo-tokenizer"
CLASSES = ("huge-int", "interpolation", "file", "outside-link", "control")
# Service routes a body is posted to: the JSON API, and the web page's form (the same config
# pasted as text, form-urlencoded; the page answers 200 with the refusal shown on it).
SERVICE_ENDPOINTS = ("/v1/validate", "/")


# --- the classes ------------------------------------------------------------------------------

HUGE_INTS = st.one_of(
    st.sampled_from([2**63 - 1, 2**62, 10**18, 2**53 + 1, 2**31, 10**12]),
    st.integers(min_value=2**31, max_value=2**63 - 1),
)
CONTROL = st.lists(
    st.one_of(
        st.characters(min_codepoint=0, max_codepoint=31),
        st.sampled_from(["\x7f", "\u0085", "\u2028", "\u202e", "%", "::error::", "\r\n"]),
        st.characters(min_codepoint=32, max_codepoint=126),
    ),
    min_size=1,
    max_size=40,
).map(lambda parts: "".join(parts) + "\n::error file=x::injected%0A")
FILE_KINDS = st.sampled_from(["sparse", "fifo", "proc", "device", "folder"])


@dataclass(frozen=True)
class Case:
    cls: str
    value: Any  # the int, the text, the file kind, or (levels, width)


def case_of(cls: str) -> st.SearchStrategy[Case]:
    if cls == "huge-int":
        return HUGE_INTS.map(lambda v: Case(cls, v))
    if cls == "interpolation":
        shape = st.tuples(st.integers(6, 12), st.integers(10, 16))
        return shape.map(lambda v: Case(cls, v))
    if cls == "file":
        return FILE_KINDS.map(lambda v: Case(cls, v))
    if cls == "outside-link":
        return st.sampled_from(["file", "folder"]).map(lambda v: Case(cls, v))
    return CONTROL.map(lambda v: Case(cls, v))


def bomb(levels: int, width: int, prefix: str = "") -> dict[str, Any]:
    tree: dict[str, Any] = {"a0": list(range(width))}
    for k in range(1, levels + 1):
        tree[f"a{k}"] = [f"${{{prefix}a{k - 1}}}"] * width
    return tree


OUTSIDE: dict[str, Path] = {}  # the service's cases: outside its only root


def hostile_file(project: Path, case: Case) -> Path:
    """The file (or folder) a path field is set to for a ``file`` or ``outside-link`` case."""
    if case.cls == "outside-link":
        secret = plant(OUTSIDE.get("dir", project.parent / "outside"))
        if case.value == "folder":  # a model/tokenizer folder whose files lead outside
            folder = project / "linked"
            folder.mkdir()
            for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
                (folder / name).symlink_to(secret)
            return folder
        link = project / "link.json"
        link.symlink_to(secret)
        return link
    kind = case.value
    if kind == "sparse":
        return sparse(project / "big" / "tokenizer.json", 2_500_000_000)
    if kind == "fifo":
        path = project / "pipe.json"
        os.mkfifo(path)
        return path
    if kind == "proc":
        return Path("/proc/self/pagemap")
    if kind == "device":
        return Path("/dev/zero")
    folder = project / "empty-folder.json"
    folder.mkdir()
    return folder


# --- judging ----------------------------------------------------------------------------------


def assert_bounded_cli(ended: Ended, case: Case, *, strict: bool = True) -> None:
    out = ended.out
    assert ended.returncode in (0, 1, 2), f"{case}: exit {ended.returncode}\n{out[-3000:]}"
    assert "Traceback" not in out, f"{case}\n{out[-3000:]}"
    assert SECRET not in out, f"{case}: outside content in the output"
    assert "\n::error file=x::" not in out, f"{case}: a workflow command was injected"
    if strict and case.cls in ("huge-int", "interpolation", "file"):
        assert ended.returncode != 0, f"{case}: accepted\n{out[-3000:]}"


# --- Hydra entry points: check, memory, data, hook ----------------------------------------

INT_FIELDS = [
    ("model", "n_layer"),
    ("model", "n_head"),
    ("model", "d_model"),
    ("model", "vocab_size"),
    ("model", "block_size"),
    ("data", "max_seq_length"),
    ("trainer", "micro_batch_size"),
    ("trainer", "gradient_accumulation_steps"),
]
PATH_FIELDS = [("tokenizer", "path"), ("model", "pretrained"), ("data", "paths")]


def _string_fields() -> list[tuple[str, str]]:
    """Every string field of the default config: (section or "", key)."""
    from cfgcheck.compose import compose
    from cfgcheck.validate import to_plain

    plain = to_plain(compose(CONF, "config"))
    fields = []
    for key, value in plain.items():
        if isinstance(value, str):
            fields.append(("", key))
        elif isinstance(value, dict):
            fields += [(key, k) for k, v in value.items() if isinstance(v, str)]
    return sorted(fields)


STRING_FIELDS = _string_fields()


def mutation(
    project: Path, case: Case, draw: Callable[[Any], Any], entry: str = "check"
) -> dict[str, Any]:
    """The primary config's body for ``case`` (on top of the default config). Dataset files
    are read by ``data`` (and ``--scan-data``) only: elsewhere a hostile ``data.paths`` is
    never opened, so the verdict may rightly be "config OK"."""
    if case.cls == "huge-int":
        section, key = draw(st.sampled_from(INT_FIELDS))
        return {section: {key: case.value}}
    if case.cls == "interpolation":
        levels, width = case.value
        return {"bomb": bomb(levels, width, "bomb.")}
    if case.cls in ("file", "outside-link"):
        fields = PATH_FIELDS if entry == "data" else PATH_FIELDS[:2]
        section, key = draw(st.sampled_from(fields))
        path = str(hostile_file(project, case))
        return {section: {key: [path] if key == "paths" else path}}
    section, key = draw(st.sampled_from(STRING_FIELDS))
    return {section: {key: case.value}} if section else {key: case.value}


def run_hydra(entry: str, project: Path) -> Ended:
    if entry == "hook":
        return run_bounded("hook", "conf/fuzz.yaml", cwd=project)
    args = [entry, "--config-dir", "conf", "--config-name", "fuzz"]
    if entry == "data":
        args.append(f"tokenizer.path={DEMO_TOKENIZER}")
    return run_bounded(*args, cwd=project)


@st.composite
def hydra_cases(
    draw: Callable[[Any], Any], cls: str, entry: str
) -> tuple[Case, Callable[[Path], Any]]:
    case = draw(case_of(cls))
    return case, lambda project: mutation(project, case, draw, entry)


def _hydra_test(entry: str, cls: str) -> None:
    @given(hydra_cases(cls, entry))
    @CASES
    def run(drawn: tuple[Case, Callable[[Path], Any]]) -> None:
        case, body_of = drawn
        with tempfile.TemporaryDirectory() as tmp:
            project = Path(tmp) / "project"
            project.mkdir()
            project = hydra_project_into(project, body_of(project))
            assert_bounded_cli(run_hydra(entry, project), case)

    run()


def hydra_project_into(project: Path, body: dict[str, Any]) -> Path:
    shutil.copytree(CONF, project / "conf")
    for asset in ("datasets", "assets"):
        if (REPO / asset).exists() and not (project / asset).exists():
            (project / asset).symlink_to(REPO / asset)
    primary = {"defaults": ["config", "_self_"], **body}
    (project / "conf" / "fuzz.yaml").write_text(yaml.safe_dump(primary, allow_unicode=False))
    return project


@pytest.mark.parametrize("cls", CLASSES)
def test_check(cls: str) -> None:
    _hydra_test("check", cls)


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["memory", "data", "hook"])
@pytest.mark.parametrize("cls", CLASSES)
def test_memory_data_hook(entry: str, cls: str) -> None:
    _hydra_test(entry, cls)


# --- the service ------------------------------------------------------------------------------


def _service_body(project: Path, case: Case, draw: Callable[[Any], Any]) -> bytes:
    from cfgcheck.compose import compose
    from cfgcheck.validate import to_plain

    config: dict[str, Any] = to_plain(compose(CONF, "config"))
    for section, values in mutation(project, case, draw).items():
        if isinstance(values, dict) and isinstance(config.get(section), dict):
            config[section] = {**config[section], **values}
        else:
            config[section] = values
    text = json.dumps(config)
    if case.cls == "control" and draw(st.booleans()):
        text = text.replace(json.dumps(case.value)[1:-1], "\\ud800" + json.dumps(case.value)[1:-1])
    return text.encode()


@st.composite
def service_cases(draw: Callable[[Any], Any], cls: str) -> tuple[Case, Callable[[Path], bytes]]:
    case = draw(case_of(cls))
    return case, lambda project: _service_body(project, case, draw)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Any]]:
    """A real ``cfgcheck serve`` under RLIMIT_AS, its only root a project folder holding a
    copy of conf/; every case adds its files in a folder of its own under the root."""
    pytest.importorskip("fastapi")
    import socket
    import subprocess

    import httpx

    from tests.bounded import MEMORY_LIMIT, _limit

    project = tmp_path_factory.mktemp("served") / "project"
    project.mkdir()
    shutil.copytree(CONF, project / "conf")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    args = ["serve", "--port", str(port), "--config-dir", "conf", "--allow-root", str(project)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "cfgcheck", *args],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="backslashreplace",
        preexec_fn=lambda: _limit(MEMORY_LIMIT),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, proc.communicate()[0]
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "cfgcheck serve did not start within 90 s"
        time.sleep(0.3)
    OUTSIDE["dir"] = project.parent / "outside"
    try:
        yield url, project, proc
    finally:
        OUTSIDE.clear()
        proc.terminate()
        try:
            log = proc.communicate(timeout=15)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            log = proc.communicate()[0]
        assert SECRET not in log
        assert "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize("endpoint", SERVICE_ENDPOINTS)
@pytest.mark.parametrize("cls", CLASSES)
def test_service(cls: str, endpoint: str, served: tuple[str, Path, Any]) -> None:
    import httpx

    url, root, proc = served

    @given(service_cases(cls))
    @CASES
    def run(drawn: tuple[Case, Callable[[Path], bytes]]) -> None:
        case, body_of = drawn
        project = Path(tempfile.mkdtemp(dir=root))
        body = body_of(project)
        if endpoint == "/":
            from urllib.parse import urlencode

            form = {"mode": "paste", "format": "cfgcheck", "config": body.decode()}
            body = urlencode(form).encode()
            kind = "application/x-www-form-urlencoded"
        else:
            kind = "application/json"
        r = httpx.post(url + endpoint, content=body, headers={"content-type": kind}, timeout=60)
        status, out = r.status_code, r.text
        assert proc.poll() is None, f"{case}: the server died"
        assert status == 200 or 400 <= status < 500, f"{case}: {status}\n{out[-3000:]}"
        assert SECRET not in out, f"{case}: outside content in the reply"
        assert str(root.parent) not in out.replace(str(project), "") or status == 200
        if endpoint == "/":  # an HTML page: a refusal is shown on a 200
            return
        if case.cls in ("interpolation", "outside-link"):
            assert status != 200, f"{case}: accepted\n{out[-3000:]}"
        if case.cls == "file":  # refused, or a verdict naming the file unreadable
            assert status != 200 or '"ok":false' in out.replace(" ", ""), f"{case}\n{out[-3000:]}"

    run()


# --- --from each native format ----------------------------------------------------------------

# Per format: the published example (tests/sources/native, sources noted there) and its keys
# for a size, a model/tokenizer path and a free-text string.
NATIVE: dict[str, tuple[Path, str, str, str]] = {
    "litgpt": (
        example("litgpt", "tiny-llama-lora.yaml"),
        "train.micro_batch_size",
        "checkpoint_dir",
        "out_dir",
    ),
    "axolotl": (
        example("axolotl", "tiny-llama-lora.yml"),
        "micro_batch_size",
        "base_model",
        "output_dir",
    ),
    "trl": (
        example("trl", "example_config.yaml"),
        "per_device_train_batch_size",
        "model_name_or_path",
        "output_dir",
    ),
    "torchtune": (
        example("torchtune", "llama2_7B_lora_single_device.yaml"),
        "batch_size",
        "tokenizer.path",
        "output_dir",
    ),
    "llamafactory": (
        example("llamafactory", "examples/train_lora/llama3_lora_sft.yaml"),
        "per_device_train_batch_size",
        "model_name_or_path",
        "output_dir",
    ),
}


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[last] = value


def native_file(project: Path, fmt: str, case: Case) -> Path:
    if fmt in ("python", "launch"):
        return script_file(project, fmt, case)
    source, int_key, path_key, text_key = NATIVE[fmt]
    tree = yaml.safe_load(source.read_text())
    if case.cls == "huge-int":
        _set(tree, int_key, case.value)
    elif case.cls == "interpolation":
        levels, width = case.value
        tree.update(bomb(levels, width))
    elif case.cls in ("file", "outside-link"):
        _set(tree, path_key, str(hostile_file(project, case)))
    else:
        _set(tree, text_key, case.value)
    path = project / f"native-{fmt}.yaml"
    path.write_text(yaml.safe_dump(tree, allow_unicode=False))
    return path


def script_file(project: Path, fmt: str, case: Case) -> Path:
    if fmt == "python":
        source = example("python", "trainer_seed.py")
        text = source.read_text()
        size, model, out = (
            "per_device_train_batch_size=4",
            'MODEL = "tiny-llama"',
            'output_dir="out"',
        )
        name = "train.py"
    else:
        seed = example("launch", "seed/train.sh").parent
        for entry in seed.iterdir():
            target = project / entry.name
            (shutil.copytree if entry.is_dir() else shutil.copyfile)(entry, target)
        text = (seed / "train.sh").read_text()
        size, model, out = (
            "--per_device_train_batch_size 2",
            "MODEL=${MODEL:-tiny-llama}",
            "--output_dir output",
        )
        name = "launch.sh"
    if case.cls == "huge-int":
        text = text.replace(
            size, size.rsplit("4" if fmt == "python" else "2", 1)[0] + str(case.value)
        )
    elif case.cls == "interpolation":
        levels, width = case.value
        text = text.replace(
            model, model + "\n" + "\n".join(f"# {k}: {v}" for k, v in bomb(levels, width).items())
        )
    elif case.cls in ("file", "outside-link"):
        path = str(hostile_file(project, case))
        text = text.replace(model, f'MODEL = "{path}"' if fmt == "python" else f"MODEL={path}")
    else:
        escaped = json.dumps(case.value)
        text = text.replace(
            out, f"output_dir={escaped}" if fmt == "python" else f"--output_dir {escaped}"
        )
    path = project / name
    path.write_text(text)
    return path


@st.composite
def native_cases(draw: Callable[[Any], Any], cls: str) -> Case:
    return draw(case_of(cls))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [*NATIVE, "python", "launch"])
@pytest.mark.parametrize("cls", CLASSES)
def test_native(fmt: str, cls: str) -> None:
    @given(native_cases(cls))
    @CASES
    def run(case: Case) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            project = Path(tmp) / "project"
            project.mkdir()
            path = native_file(project, fmt, case)
            ended = run_bounded("check", "--from", fmt, str(path), "--gpu", "H100", cwd=project)
            # A native file's ${...} is text to every format but torchtune (which resolves
            # plain references, bounded): it must end, not necessarily be refused.
            assert_bounded_cli(ended, case, strict=case.cls == "huge-int")

    run()


@pytest.mark.slow
def test_expect_100_continue_without_a_body_holds_no_worker(served: tuple[str, Path, Any]) -> None:
    """uvicorn answers ``100 Continue`` when the app first reads the body; the body read is
    bounded by the request timeout (408) and happens before a worker is taken, so valid
    requests are answered meanwhile."""
    import socket

    import httpx

    url, _, proc = served
    host, port = url.removeprefix("http://").split(":")
    held = []
    for _ in range(8):  # more connections than validation threads
        sock = socket.create_connection((host, int(port)))
        sock.sendall(
            b"POST /v1/validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nContent-Length: 500\r\n\r\n"
        )
        held.append(sock)
    body = {"config_name": "config", "overrides": []}
    started = time.monotonic()
    assert httpx.post(f"{url}/v1/validate", json=body, timeout=30).status_code == 200
    assert time.monotonic() - started < 8  # not queued behind the held connections
    for sock in held:
        sock.settimeout(30)
        answer = b""
        while b"408" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        assert b"100 Continue" in answer and b"408" in answer, answer
        sock.close()
    assert proc.poll() is None
