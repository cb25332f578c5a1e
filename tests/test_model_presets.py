"""The preset registry (cfgcheck/models/presets.py) and the conf/model/*.yaml generated from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from cfgcheck.models import presets
from cfgcheck.models.presets import (
    DuplicatePresetError,
    Preset,
    all_presets,
    find_preset,
    render_yaml,
)
from cfgcheck.schema.model import ModelConfig
from tests.conftest import CONF, MODEL_FOLDER_OPTION

NAMES = [p.name for p in all_presets()]
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


def test_every_conf_model_file_is_its_rendered_preset() -> None:
    """conf/model/ is generated from the registry: same files, same text, same values."""
    files = {p.stem: p for p in (CONF / "model").glob("*.yaml") if p.stem != MODEL_FOLDER_OPTION}
    assert sorted(files) == sorted(NAMES)
    for preset in all_presets():
        text = files[preset.name].read_text()
        assert text == render_yaml(preset), (
            f"{files[preset.name]} differs from the registry: "
            "run python -m cfgcheck.models.presets conf/model"
        )
        assert yaml.safe_load(text) == dict(preset.config)


@pytest.mark.parametrize("name", NAMES)
def test_preset_is_a_valid_model_section_with_its_source_and_hub_ids(name: str) -> None:
    preset = find_preset(name)
    assert preset is not None
    model = ModelConfig.model_validate(dict(preset.config))
    assert (model.name, model.source) == (preset.name, preset.source)
    link = r"https://huggingface\.co/[^/]+/[^/]+/blob/main/config\.json"
    assert re.fullmatch(link, preset.source)
    assert preset.hub_ids and all(HUB_ID.match(h) for h in preset.hub_ids)
    # The source repo is one of the Hub ids; only non-default values are listed.
    assert preset.source.split("/")[3:5] in [h.split("/") for h in preset.hub_ids]
    defaults = {k: f.default for k, f in ModelConfig.model_fields.items() if not f.is_required()}
    assert [k for k, v in preset.config.items() if k in defaults and defaults[k] == v] == []


def test_find_preset_by_name_and_hub_id_ignores_case() -> None:
    tiny = find_preset("tinyllama-1.1b")
    assert tiny is not None
    assert find_preset("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T") is tiny
    assert find_preset("tinyllama/tinyllama-1.1b-intermediate-step-1431k-3t") is tiny
    assert find_preset("TINYLLAMA-1.1B") is tiny
    assert find_preset("meta-llama/Meta-Llama-3-8B") is find_preset("llama-3-8b")
    assert find_preset("no-such/model") is None
    assert find_preset("") is None


def test_presets_are_immutable() -> None:
    preset = all_presets()[0]
    with pytest.raises(TypeError):
        preset.config["n_layer"] = 1  # type: ignore[index]
    assert isinstance(preset, Preset)


def test_registry_refuses_duplicate_names_and_hub_ids() -> None:
    reg = presets._Registry()
    reg.add(("org/a",), "", {"name": "a", "source": "s"})
    with pytest.raises(DuplicatePresetError, match="'A'"):
        reg.add(("org/b",), "", {"name": "A", "source": "s"})
    with pytest.raises(DuplicatePresetError, match="Org/A"):
        reg.add(("Org/A",), "", {"name": "b", "source": "s"})
    with pytest.raises(DuplicatePresetError):
        reg.add(("org/c", "org/c"), "", {"name": "c", "source": "s"})
    assert [p.name for p in reg.all()] == ["a"]  # nothing half-registered
    assert reg.find("ORG/a") is not None and reg.find("org/c") is None


def test_every_name_and_hub_id_is_registered_once() -> None:
    keys = [k.casefold() for p in all_presets() for k in (p.name, *p.hub_ids)]
    assert len(keys) == len(set(keys))


def test_write_conf_regenerates_the_files(tmp_path: Path) -> None:
    written = presets.write_conf(tmp_path)
    shipped = sorted(
        p.name for p in (CONF / "model").glob("*.yaml") if p.stem != MODEL_FOLDER_OPTION
    )
    assert sorted(p.name for p in written) == shipped
    for path in written:
        assert path.read_text() == (CONF / "model" / path.name).read_text()


def test_importing_presets_imports_nothing_heavy() -> None:
    import subprocess
    import sys

    code = (
        "import sys, cfgcheck.models.presets as p; p.all_presets(); "
        "print(sorted(m for m in ('torch', 'transformers', 'hydra') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
