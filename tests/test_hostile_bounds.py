"""Issue 25, second round: each class closed where it arises, one reproduction per example.

- Files read without bound: a sparse 2.5 GB ``tokenizer.json`` / ``tokenizer.model`` is
  refused by its stated size before the tokenizers library or transformers sees it; a FIFO
  beside a ``tokenizer.model``; ``/proc/self/pagemap``; 40k ``added_tokens_decoder`` entries;
  a 30 MB dataset line and one 30 MB word.
- Interpolation bombs (10^9 list elements) in ``conf/config.yaml``, through
  ``hydra.searchpath`` and through a defaults entry: for ``check``, the hook and the service.
- The service: 128 overrides of 1,000-character lists refused before the compose lock; a
  request's CPU budget; LLaMA-Factory's inline ``dataset_dir`` registry confined.

The CLI cases run the real command in a subprocess under RLIMIT_AS and a timeout
(:mod:`tests.bounded`): a regression fails, it never hangs the suite or the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.budget import BudgetExceeded, cpu_budget
from cfgcheck.interpolation_cost import InterpolationBudget, check_cost
from cfgcheck.safeio import CAPS, UnsafeInput, read_capped, require_capped
from cfgcheck.tokenizer.resolve import TokenizerFileError, resolve_tokenizer
from tests.bounded import SECRET, assert_refused, plant, run_bounded, sparse
from tests.conftest import CONF, REPO
from tests.factories import bpe, save_file

GB = 1 << 30
DEMO_TOKENIZER = REPO / "assets" / "demo-tokenizer"


# --- 1. bounded reads -------------------------------------------------------------------------


def test_caps_are_documented_with_their_variables() -> None:
    for kind, cap in CAPS.items():
        assert cap.env == "CFGCHECK_MAX_" + kind.upper().replace("-", "_") + "_BYTES"
        assert cap.default > 0 and cap.what


def test_a_cap_is_changed_by_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text("x" * 100)
    assert read_capped(path, "tokenizer") == b"x" * 100
    monkeypatch.setenv("CFGCHECK_MAX_TOKENIZER_BYTES", "50")
    with pytest.raises(UnsafeInput, match="CFGCHECK_MAX_TOKENIZER_BYTES"):
        read_capped(path, "tokenizer")


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer.model"])
def test_a_sparse_tokenizer_is_refused_by_size_before_any_library_sees_it(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = sparse(tmp_path / "tok" / name, 2_500_000_000)
    import tokenizers

    def never(*_: Any) -> None:
        raise AssertionError("the tokenizers library was handed the file")

    monkeypatch.setattr(tokenizers.Tokenizer, "from_str", never)
    monkeypatch.setattr(tokenizers.Tokenizer, "from_file", never)
    for target in (path, path.parent):
        with pytest.raises(TokenizerFileError, match=r"larger than .* bytes, the cap"):
            resolve_tokenizer(target)


def test_a_sparse_tokenizer_json_through_the_cli(tmp_path: Path) -> None:
    path = sparse(tmp_path / "tok" / "tokenizer.json", 2_500_000_000)
    ended = run_bounded("check", f"tokenizer.path={path}", memory=GB, timeout=60)
    assert "cap for a tokenizer.json" in ended.out, ended.out[-2000:]


def test_a_fifo_beside_a_tokenizer_model_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(b"\x00" * 16)
    os.mkfifo(folder / "special_tokens_map.json")
    ended = run_bounded("check", f"tokenizer.path={folder}", memory=2 * GB, timeout=60)
    assert "FIFO" in ended.out, ended.out[-2000:]
    assert ended.returncode in (1, 2)


def test_proc_files_are_refused() -> None:
    with pytest.raises(UnsafeInput, match="kernel pseudo-file"):
        require_capped("/proc/self/pagemap", "tokenizer")
    with pytest.raises(TokenizerFileError, match="kernel pseudo-file"):
        resolve_tokenizer("/proc/self/pagemap")


def test_40k_added_tokens_get_consecutive_ids(tmp_path: Path) -> None:
    """The ids transformers gives them (one after another past the vocabulary); the loop
    that assigned them recomputed the largest id per token (quadratic: minutes at 40k)."""
    tok = bpe()
    save_file(tok, tmp_path)
    base = tok.get_vocab_size(with_added_tokens=True)
    decoder = {str(base + i): {"content": f"<extra_{i}>"} for i in range(40_000)}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "added_tokens_decoder": decoder}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    real = resolve_tokenizer(tmp_path)
    assert real.size == base + 40_000
    assert real.token_id("<extra_0>") == base
    assert real.token_id("<extra_39999>") == base + 39_999


@pytest.fixture
def one_line_data(tmp_path: Path) -> Path:
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("line", ["word", "words"])
def test_a_30mb_line_or_word_ends_in_one_line(tmp_path: Path, line: str) -> None:
    """A 30 MB record (one word, or words): refused by the record cap before it is
    tokenized (it cost 2.9 GB and an abort), under a 2 GiB address space."""
    text = "x" * 30_000_000 if line == "word" else "ab " * 10_000_000
    (tmp_path / "d.jsonl").write_text(json.dumps({"text": text}) + "\n")
    ended = run_bounded(
        "data",
        f"tokenizer.path={DEMO_TOKENIZER}",
        f"data.paths=[{tmp_path / 'd.jsonl'}]",
        "data.format=jsonl",
        "data.text_field=text",
        "data.template=null",
        memory=2 * GB,
        timeout=120,
    )
    assert_refused(ended, "longer than", "CFGCHECK_MAX_RECORD_BYTES")


def test_a_long_record_is_refused_at_the_configured_cap(tmp_path: Path) -> None:
    (tmp_path / "d.txt").write_text("short\n" + "y" * 5000 + "\n")
    ended = run_bounded(
        "data",
        f"tokenizer.path={DEMO_TOKENIZER}",
        f"data.paths=[{tmp_path / 'd.txt'}]",
        "data.format=text",
        env={"CFGCHECK_MAX_RECORD_BYTES": "1000"},
    )
    line = assert_refused(ended, "longer than 1,000 bytes")
    assert ":2" in line  # the file and line of the record


# --- 2. interpolation bombs -----------------------------------------------------------------


def bomb_lines(prefix: str = "", levels: int = 9, width: int = 10) -> list[str]:
    """``a0`` a list of ``width`` values, ``a{k}`` a list of ``width`` references to
    ``a{k-1}``: ``width ** levels`` values once resolved, from a 1 KB text."""
    lines = ["a0: [" + ",".join(["1"] * width) + "]"]
    for k in range(1, levels + 1):
        lines.append(f"a{k}: [" + ",".join([f'"${{{prefix}a{k - 1}}}"'] * width) + "]")
    return lines


@pytest.fixture
def bombed(tmp_path: Path) -> Iterator[Path]:
    shutil.copytree(CONF, tmp_path / "conf")
    yield tmp_path / "conf"


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + "\n" + text + "\n")


@pytest.mark.parametrize("how", ["config", "searchpath", "defaults", "group-option"])
def test_interpolation_bombs_are_refused_before_hydra_resolves(bombed: Path, how: str) -> None:
    if how == "config":
        _append(
            bombed / "config.yaml", "bomb:\n" + "\n".join("  " + x for x in bomb_lines("bomb."))
        )
    elif how == "searchpath":
        _append(
            bombed / "config.yaml", "hydra:\n  searchpath: ['${a9}']\n" + "\n".join(bomb_lines())
        )
    elif how == "defaults":  # a defaults entry whose option file holds the bomb
        (bombed / "extra").mkdir()
        (bombed / "extra" / "big.yaml").write_text("\n".join(bomb_lines("extra.")) + "\n")
        text = (
            (bombed / "config.yaml").read_text().replace("  - _self_", "  - extra: big\n  - _self_")
        )
        (bombed / "config.yaml").write_text(text)
    else:  # model=k selects it
        (bombed / "model" / "k.yaml").write_text(
            (bombed / "model" / "tinyllama-1.1b.yaml").read_text() + "\n".join(bomb_lines("model."))
        )
    args = ["check", "--config-dir", str(bombed)] + (["model=k"] if how == "group-option" else [])
    ended = run_bounded(*args, memory=2 * GB, timeout=60)
    assert_refused(ended, "would produce more than 1,000,000 values")


def test_the_count_is_linear_and_exact() -> None:
    import yaml

    tree = yaml.safe_load("\n".join(bomb_lines(levels=4)))
    # a0 is a list of 10 values (11); a_k a list of 10 strings, each one value plus a_{k-1}
    costs = [11]
    for _ in range(4):
        costs.append(1 + 10 * (1 + costs[-1]))
    assert check_cost(tree, "t") == 1 + sum(costs)  # the root, then each key's subtree
    with pytest.raises(InterpolationBudget):
        check_cost(yaml.safe_load("\n".join(bomb_lines())), "t")


def test_a_bomb_through_the_hook(bombed: Path) -> None:
    _append(bombed / "config.yaml", "bomb:\n" + "\n".join("  " + x for x in bomb_lines("bomb.")))
    root = bombed.parent
    ended = run_bounded("hook", "conf/config.yaml", cwd=root, memory=2 * GB, timeout=60)
    assert ended.returncode == 2, ended.out[-2000:]
    assert "would produce more than" in ended.out
    assert "Traceback" not in ended.out


# --- 3. the service ---------------------------------------------------------------------------


def _service(config_dir: Path = CONF, roots: tuple[Path, ...] = (), timeout: float = 10.0) -> Any:
    from fastapi.testclient import TestClient

    from cfgcheck.service.app import create_app
    from cfgcheck.service.settings import ServiceSettings

    settings = ServiceSettings(
        config_dir=config_dir, allowed_roots=roots, request_timeout_s=timeout
    )
    return TestClient(create_app(settings), raise_server_exceptions=False)


def test_a_bomb_in_the_services_config_dir_stops_it_at_start(bombed: Path) -> None:
    """A request cannot bring interpolations (bodies and overrides holding ``${`` are
    refused); the server's own config directory is screened, bombs included, when the app
    is created: `cfgcheck serve` refuses to start in one line."""
    pytest.importorskip("fastapi")
    _append(bombed / "config.yaml", "bomb:\n" + "\n".join("  " + x for x in bomb_lines("bomb.")))
    with pytest.raises(InterpolationBudget, match="would produce more than"):
        _service(bombed)
    ended = run_bounded("serve", "--config-dir", str(bombed), "--port", "1", memory=2 * GB)
    assert_refused(ended, "would produce more than")


def test_costly_overrides_never_take_the_compose_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """128 overrides of 1,000-character lists cost Hydra ~6 s to parse, under the lock
    every composition of the process waits on: the screen measures the parse (outside the
    lock) and refuses before any composition starts."""
    pytest.importorskip("fastapi")
    from cfgcheck.service.runner import Runner

    composed: list[object] = []
    monkeypatch.setattr(Runner, "_compose", lambda self, request: composed.append(request))
    overrides = [f"+x{i}=[" + ",".join(["ab"] * 330) + "]" for i in range(128)]
    assert all(len(o) <= 1000 for o in overrides)
    with _service() as client:
        r = client.post("/v1/validate", json={"config_name": "config", "overrides": overrides})
    assert r.status_code == 422, r.text
    assert "over the 4,000 one request may send" in r.json()["detail"]
    assert not composed


def test_overrides_over_their_parse_budget_are_refused_before_the_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("fastapi")
    from cfgcheck.service import overrides as screen
    from cfgcheck.service.runner import Runner

    composed: list[object] = []
    monkeypatch.setattr(Runner, "_compose", lambda self, request: composed.append(request))
    monkeypatch.setattr(screen, "MAX_PARSE_CPU_S", 0.0)
    with _service() as client:
        body = {"config_name": "config", "overrides": ["data.paths=[a,b,c]"] * 3}
        r = client.post("/v1/validate", json=body)
    assert r.status_code == 422, r.text
    assert "s of CPU to parse" in r.json()["detail"]
    assert not composed


def test_a_mapping_of_19000_keys_is_refused_before_validation() -> None:
    pytest.importorskip("fastapi")
    from cfgcheck.compose import compose
    from cfgcheck.validate import to_plain

    config = to_plain(compose(CONF, "config"))
    config["model"].update({f"unknown_key_{i}": i for i in range(19_000)})
    with _service() as client:
        r = client.post("/v1/validate", json=config)
    assert r.status_code == 422, r.text
    assert "model has 19,0" in r.json()["detail"] and "1,000" in r.json()["detail"]


def test_a_request_past_its_cpu_budget_is_refused() -> None:
    from cfgcheck.service.errors import RequestError
    from cfgcheck.service.runner import Runner
    from cfgcheck.service.settings import ServiceSettings

    job = Runner(ServiceSettings(config_dir=CONF, request_timeout_s=1e-6))
    body = json.dumps({"config_name": "config", "overrides": []}).encode()
    with pytest.raises(RequestError) as info:
        job.run(body, "json")
    assert info.value.status == 422
    assert "CPU budget" in info.value.detail


def test_the_budget_is_per_thread_and_nests() -> None:
    from cfgcheck.budget import check

    check("outside any budget")  # never raises
    with cpu_budget(100.0), cpu_budget(0.0), pytest.raises(BudgetExceeded):
        sum(range(10_000))
        check("a loop")
    errors: list[BaseException] = []

    def other() -> None:
        try:
            check("another thread")
        except BaseException as e:  # pragma: no cover - the failure
            errors.append(e)

    with cpu_budget(0.0):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert not errors


def test_llamafactory_inline_registry_is_confined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("fastapi")
    inside = tmp_path / "inside"
    inside.mkdir()
    secret = plant(tmp_path / "outside")
    (inside / "link.json").symlink_to(secret)
    monkeypatch.chdir(inside)
    base = "model_name_or_path: m\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
    with _service(roots=(inside,)) as client:
        for file_name in (
            str(secret),
            "link.json",
            "../outside/secret.txt",
            str(tmp_path / "outside"),
        ):
            config = base + f"dataset: x\ndataset_dir: {{x: {{file_name: '{file_name}'}}}}\n"
            r = client.post("/v1/validate", json={"format": "llamafactory", "config": config})
            assert r.status_code == 422, r.text
            detail = r.json()["detail"]
            assert "dataset_dir.x.file_name" in detail, detail
            assert SECRET not in detail and str(tmp_path / "outside") not in detail


def test_a_record_rendering_past_the_cap_is_refused(tmp_path: Path) -> None:
    """A template repeating a field renders a text longer than any line read."""
    (tmp_path / "d.jsonl").write_text(json.dumps({"a": "x" * 400}) + "\n")
    ended = run_bounded(
        "data",
        f"tokenizer.path={DEMO_TOKENIZER}",
        f"data.paths=[{tmp_path / 'd.jsonl'}]",
        "data.format=jsonl",
        "data.template='{a}{a}{a}{a}'",
        env={"CFGCHECK_MAX_RECORD_BYTES": "1000"},
    )
    line = assert_refused(ended, "renders to more than 1,000 characters")
    assert "d.jsonl:1" in line


@pytest.mark.parametrize("sweep", [False, True])
def test_a_bomb_spread_over_two_files_is_refused_once_composed(bombed: Path, sweep: bool) -> None:
    """Each file alone is cheap (its references lead into the other file); the composed tree
    is counted before anything resolves it, on the plain path and for each sweep point."""
    lines = bomb_lines()
    _append(bombed / "config.yaml", "\n".join(lines[::2]))  # a0, a2, a4, a6, a8
    (bombed / "odd.yaml").write_text("\n".join(lines[1::2]) + "\n")  # a1, a3, ... a9
    text = (bombed / "config.yaml").read_text().replace("  - _self_", "  - odd\n  - _self_")
    (bombed / "config.yaml").write_text(text)
    args = ["check", "--config-dir", str(bombed)] + (["--sweep", "seed=1,2"] if sweep else [])
    ended = run_bounded(*args, memory=2 * GB, timeout=60)
    assert ended.returncode in ((1, 2) if sweep else (2,)), ended.out[-2000:]
    assert "would produce more than 1,000,000 values" in ended.out, ended.out[-2000:]
    assert "Traceback" not in ended.out
