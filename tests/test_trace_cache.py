"""Meta-device traces kept across processes (cfgcheck/memory/trace_cache.py): the shipped traces
of the presets read generically equal a fresh meta build, a trace survives the JSON round trip
exactly, the on-disk cache ignores and rewrites a bad entry, honours CFGCHECK_NO_CACHE and is off
in the service, and checking the presets imports neither torch nor transformers, with the same
output as a check that builds the model."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cfgcheck.memory import trace_cache, traced
from cfgcheck.memory.traced import Trace, TraceError, from_json, to_json, trace, trace_key
from tests.conftest import REPO, requires
from tests.test_cold_start import probe


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_preset_traces", REPO / "scripts/gen_preset_traces.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _script()
GENERIC = GEN.generic_presets()

# A Mixtral of 2 layers and 4 experts: fused 3D experts, a router, PEFT's MoE name table.
TINY_MOE: dict[str, Any] = {
    "model_type": "mixtral",
    "architectures": ["MixtralForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh on-disk cache, no shipped traces, and an empty in-process cache."""
    monkeypatch.setenv("CFGCHECK_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CFGCHECK_NO_CACHE", raising=False)
    monkeypatch.setattr(trace_cache, "SHIPPED", tmp_path / "no-shipped")
    monkeypatch.setattr(trace_cache, "_disk", True)
    traced._trace.cache_clear()
    yield tmp_path / "traces"
    traced._trace.cache_clear()


def _ordered(tr: Trace) -> list[Any]:
    """The trace with the order of every mapping (readers take the first match in it)."""
    data = to_json(tr)
    return [(k, list(v.items()) if isinstance(v, dict) else v) for k, v in data.items()]


def _entry(cache: Path) -> Path:
    (path,) = cache.glob("*.json")
    return path


# -- shipped traces ---------------------------------------------------------------------------


def test_every_preset_read_generically_has_its_shipped_trace() -> None:
    wanted = {trace_cache.shipped_name(key): name for name, key in GENERIC.items()}
    assert {"gemma-3-4b", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-20b"} <= set(GENERIC)
    files = {p.name for p in trace_cache.SHIPPED.glob("*.json.gz")}
    assert files == set(wanted), "run python scripts/gen_preset_traces.py"
    for file, name in wanted.items():
        entry = trace_cache.read_shipped(trace_cache.SHIPPED / file)
        assert entry is not None and entry["preset"] == name
        assert entry["key"] == GENERIC[name]
        tr = from_json(entry["trace"])
        assert tr is not None and to_json(tr) == entry["trace"]  # exact round trip


@pytest.mark.slow
@requires("torch", "transformers")
@pytest.mark.parametrize("name", sorted(GENERIC))
def test_shipped_trace_equals_a_fresh_meta_build(name: str) -> None:
    key = GENERIC[name]
    entry = trace_cache.read_shipped(trace_cache.SHIPPED / trace_cache.shipped_name(key))
    assert entry is not None
    ours = trace_cache.installed("transformers")
    assert ours is not None
    if trace_cache.minor(ours) != trace_cache.minor(entry["transformers"]):
        pytest.skip(f"shipped from transformers {entry['transformers']}, not used with {ours}")
    assert (
        GEN.render(GEN.entry(name, key))
        == (trace_cache.SHIPPED / trace_cache.shipped_name(key)).read_bytes()
    ), "run python scripts/gen_preset_traces.py"


def test_shipped_traces_stand_in_only_for_the_same_minor_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = GENERIC["qwen3-30b-a3b"]
    versions = {"transformers": "5.24.3", "torch": "2.13.0"}
    monkeypatch.setattr(trace_cache, "installed", lambda package: versions.get(package))
    assert trace_cache.shipped(key) is not None  # another patch release
    versions["transformers"] = "4.57.1"  # MoE experts as ModuleLists of linears there
    assert trace_cache.shipped(key) is None
    versions.pop("torch")  # no meta build possible: the shipped trace is the only one
    assert trace_cache.shipped(key) is not None
    versions.clear()
    assert trace_cache.shipped(key) is not None
    assert trace_cache.shipped(key + " ") is None  # another config


# -- the on-disk cache ------------------------------------------------------------------------


@requires("torch", "transformers")
def test_disk_round_trip_equals_a_fresh_trace(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = trace(TINY_MOE)
    assert fresh.experts and fresh.peft_moe == "mixtral"
    stored = json.loads(_entry(cache).read_text())
    assert stored["key"] == trace_key(TINY_MOE) and stored["format"] == trace_cache.FORMAT
    traced._trace.cache_clear()

    def no_build(key: str) -> Trace:
        raise AssertionError("built again")

    monkeypatch.setattr(traced, "build", no_build)
    again = trace(TINY_MOE)
    assert again == fresh and _ordered(again) == _ordered(fresh)
    assert again.active == fresh.active and again.expert_params == fresh.expert_params


BAD_ENTRIES = {
    "not json": b"{not json",
    "not utf-8": b"\xff\xfe{}",
    "another format": b'{"format": 999}',
    "ill-typed": None,  # the right key with a string where a count is
    "another key": None,
    "deep": b"[" * 100 + b"]" * 100,
}


@requires("torch", "transformers")
@pytest.mark.parametrize("kind", [*BAD_ENTRIES, "fifo", "too large"])
def test_a_bad_entry_is_ignored_and_rewritten(
    cache: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    fresh = trace(TINY_MOE)
    path = _entry(cache)
    good = json.loads(path.read_text())
    traced._trace.cache_clear()
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)  # opening it would block: safeio refuses it
    elif kind == "too large":
        with path.open("wb") as f:
            f.truncate(trace_cache.MAX_ENTRY_BYTES + 1)  # sparse: refused by its stated size
    elif kind == "ill-typed":
        path.write_text(json.dumps({**good, "trace": {**good["trace"], "total": "1"}}))
    elif kind == "another key":
        path.write_text(json.dumps({**good, "key": trace_key({**TINY_MOE, "vocab_size": 256})}))
    else:
        path.write_bytes(BAD_ENTRIES[kind] or b"")
    built: list[str] = []
    real = traced.build

    def counted(key: str) -> Trace:
        built.append(key)
        return real(key)

    monkeypatch.setattr(traced, "build", counted)
    assert trace(TINY_MOE) == fresh
    assert built == [trace_key(TINY_MOE)]
    assert path.is_file() and json.loads(path.read_text()) == good  # rewritten


def test_an_ill_typed_trace_is_refused() -> None:
    entry = trace_cache.read_shipped(
        trace_cache.SHIPPED / trace_cache.shipped_name(GENERIC["mixtral-8x7b"])
    )
    assert entry is not None
    data = entry["trace"]
    assert from_json(data) is not None
    for broken in (
        {**data, "total": True},
        {**data, "linears": {"x": [1, 2]}},
        {**data, "experts": [["p", 1, 2, 3, "4"]]},
        {**data, "param_shapes": {"w": [1.5]}},
        {**data, "tree": []},
        {k: v for k, v in data.items() if k != "hidden"},
        {**data, "extra": 1},
    ):
        assert from_json(broken) is None


@requires("torch", "transformers")
def test_no_cache_and_the_service_write_nothing(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CFGCHECK_NO_CACHE", "1")
    first = trace(TINY_MOE)
    assert trace_cache.trace_dir() is None and not cache.exists()
    monkeypatch.delenv("CFGCHECK_NO_CACHE")
    traced._trace.cache_clear()
    from cfgcheck.service.app import create_app
    from cfgcheck.service.settings import ServiceSettings

    create_app(ServiceSettings(config_dir=REPO / "conf", allowed_roots=(REPO,)))
    assert trace_cache.trace_dir() is None  # the service traces in its process only
    assert trace(TINY_MOE) == first and not cache.exists()


@requires("torch", "transformers")
def test_a_trace_kept_under_one_transformers_is_not_read_without_it(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk key names the installed versions: without transformers, a folder traced before
    is the same one-line error as on a machine that never had it (only shipped traces stand
    in for a build there)."""
    from cfgcheck.models.files import ModelFolderError
    from cfgcheck.models.resolve import _read_folder, resolve_pretrained
    from tests.model_folders import write_config

    folder = write_config(tmp_path / "m", TINY_MOE)
    assert resolve_pretrained(str(folder))  # traced and read, both kept on disk
    assert len(list(cache.glob("*.json"))) == 2
    traced._trace.cache_clear()
    _read_folder.cache_clear()  # the folder read again, not remembered by this process
    for name in ("transformers", "transformers.models.auto.configuration_auto"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ModelFolderError, match=r"install cfgcheck\[transformers\]"):
        resolve_pretrained(str(folder))


def test_an_unbuildable_config_is_still_one_error(cache: Path) -> None:
    with pytest.raises(TraceError, match="not an architecture"):
        trace({"model_type": "no-such-architecture", "hidden_size": 8})
    assert not cache.exists()


# -- the command line -------------------------------------------------------------------------

# Makes torch and transformers unimportable (find_spec answers None), as where not installed.
WITHOUT = "import sys\nsys.modules['torch'] = None\nsys.modules['transformers'] = None\n"
COMMANDS = [
    ("check", "model=qwen3-30b-a3b", "tokenizer=qwen3"),
    ("check", "model=gemma-3-4b"),
    ("memory", "model=qwen3-30b-a3b", "tokenizer=qwen3"),
    ("memory", "model=gemma-3-4b"),
]


@pytest.mark.parametrize("command", COMMANDS[:2], ids=["qwen3-30b-a3b", "gemma-3-4b"])
def test_checking_a_generic_preset_imports_neither(
    command: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CFGCHECK_NO_CACHE", "1")  # the shipped trace, not a disk entry
    result, _ = probe(*command, "--format", "json")
    assert result["heavy"] == [] and result["rc"] in (0, 1)


def _outputs(prelude: str) -> list[str]:
    """The ``--format json`` output of every command of :data:`COMMANDS`, in one process."""
    script = prelude + (
        "import io, json, sys, contextlib\nfrom cfgcheck.cli import main\nouts = []\n"
        f"for args in {COMMANDS!r}:\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        rc = main([*args, '--format', 'json'])\n"
        "    outs.append(f'{rc}\\n{buf.getvalue()}')\n"
        "heavy = sorted(m for m, v in sys.modules.items() if v is not None "
        "and m.split('.')[0] in ('torch', 'transformers'))\n"
        "print(json.dumps({'outs': outs, 'heavy': bool(heavy)}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    assert result["heavy"] is False, prelude
    outs: list[str] = result["outs"]
    return outs


def _outputs_built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The outputs of :data:`COMMANDS` with every model built on the meta device: no shipped
    traces, no disk cache, the in-process cache emptied, in this process (torch and
    transformers are imported here already: a fresh process spent most of its time importing
    them); each preset's architecture is built (``traced.build`` runs for it)."""
    from cfgcheck.cli import main

    built: list[str] = []
    build = traced.build

    def counted(key: str) -> Trace:
        built.append(json.loads(key)["model_type"])
        return build(key)

    monkeypatch.setenv("CFGCHECK_NO_CACHE", "1")
    monkeypatch.setattr(trace_cache, "SHIPPED", Path("/nonexistent"))
    monkeypatch.setattr(traced, "build", counted)
    monkeypatch.chdir(REPO)
    traced._trace.cache_clear()
    outs = []
    try:
        for args in COMMANDS:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc = main([*args, "--format", "json"])
            outs.append(f"{rc}\n{buf.getvalue()}")
    finally:
        traced._trace.cache_clear()
    assert {"qwen3_moe", "gemma3"} <= set(built), built
    return outs


@requires("torch", "transformers")
def test_output_is_the_same_with_the_shipped_trace_without_transformers_and_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shipped = _outputs("")
    assert shipped == _outputs(WITHOUT)
    assert shipped == _outputs_built(monkeypatch)
    for out in shipped:
        rc, text = out.split("\n", 1)
        assert rc in ("0", "1") and json.loads(text)  # real verdicts, not load errors


# -- a model folder of such a family ----------------------------------------------------------


@requires("torch", "transformers")
def test_a_model_folder_checked_again_imports_neither_and_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Qwen3-30B-A3B's published config.json as ``model.pretrained``: the first check builds
    it on the meta device, a repeated one reads the trace and the folder's reading from the
    disk cache, with the output of a check that caches nothing."""
    from tests.model_folders import write_config
    from tests.model_folders_recent import RECENT

    folder = write_config(tmp_path / "qwen3-moe", RECENT["Qwen/Qwen3-30B-A3B"])
    args = ("check", "--format", "json", "~model", f"+model.pretrained={folder}", "tokenizer=qwen3")
    monkeypatch.setenv("CFGCHECK_CACHE_DIR", str(tmp_path / "cache"))
    first, out = probe(*args)
    assert "torch" in first["heavy"] and first["rc"] in (0, 1)
    assert len(list((tmp_path / "cache" / "traces").glob("*.json"))) == 2  # trace, reading
    again, out_again = probe(*args)
    assert again == {"rc": first["rc"], "heavy": []}
    monkeypatch.setenv("CFGCHECK_NO_CACHE", "1")
    built, out_built = probe(*args)
    assert built["rc"] == first["rc"] and "torch" in built["heavy"]  # nothing cached: built
    assert out == out_again == out_built and json.loads(out)["findings"] is not None


@requires("torch", "transformers")
def test_a_folder_reading_round_trips(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cfgcheck.models import generic
    from tests.model_folders_recent import RECENT

    configs = (TINY_MOE, RECENT["google/gemma-3-4b-it"])
    fresh = [generic.generic_model(config, "config.json", "llama") for config in configs]
    traced._trace.cache_clear()

    def no_reading(*args: Any) -> None:
        raise AssertionError("read again")

    monkeypatch.setattr(generic, "_generic_model", no_reading)
    for config, first in zip(configs, fresh, strict=True):
        kept = generic.generic_model(config, "config.json", "llama")
        assert list(kept.items()) == list(first.items())
    assert len(list(cache.glob("*.json"))) == 4
