"""scripts/gen_torchtune_builders.py reads torchtune's source with ``ast`` (never importing it):
run on a small git repository laid out like pytorch/torchtune, it follows builders through
their component builders, partials and aliases, and reads recipes' config keys and the recipe
registry. The committed data file is checked against the configs it serves."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cfgcheck.sources import torchtune_data as tt
from tests.conftest import REPO
from tests.sources.support import NATIVE

SCRIPT = REPO / "scripts" / "gen_torchtune_builders.py"

FILES = {
    "torchtune/__init__.py": "",
    "torchtune/models/__init__.py": "",
    "torchtune/models/fam/__init__.py": (
        "from torchtune.models.fam._model_builders import fam_1b, lora_fam_1b, qlora_fam_1b\n"
        "from ._model_builders import fam_tokenizer\n"
    ),
    "torchtune/models/fam/_component_builders.py": (
        "def fam(vocab_size: int, num_layers: int, num_heads: int, embed_dim: int,\n"
        "        max_seq_len: int = 4096, rope_base: float = 10_000.0,\n"
        "        tie_word_embeddings: bool = False):\n"
        "    return TransformerDecoder(layers=num_layers)\n"
        "def lora_fam(lora_attn_modules, apply_lora_to_mlp: bool = False, *,\n"
        "             vocab_size: int, num_layers: int, num_heads: int, embed_dim: int,\n"
        "             lora_rank: int, lora_alpha: float, quantize_base: bool = False):\n"
        "    return TransformerDecoder(layers=num_layers)\n"
    ),
    "torchtune/models/fam/_model_builders.py": (
        "from functools import partial\n"
        "from torchtune.models.fam._component_builders import fam, lora_fam\n"
        "def fam_1b(tie_word_embeddings: bool = True):\n"
        "    return fam(32_000, 16, 8, 2048, tie_word_embeddings=tie_word_embeddings)\n"
        "def lora_fam_1b(lora_attn_modules, lora_rank: int = 8, lora_alpha: float = 16,\n"
        "                quantize_base: bool = False):\n"
        "    return lora_fam(lora_attn_modules, vocab_size=32_000, num_layers=16, num_heads=8,\n"
        "                    embed_dim=2048, lora_rank=lora_rank, lora_alpha=lora_alpha,\n"
        "                    quantize_base=quantize_base)\n"
        "qlora_fam_1b = partial(lora_fam_1b, quantize_base=True)\n"
        "fam_big = fam_1b\n"
        "def fam_tokenizer(path: str, max_seq_len=None):\n"
        "    return Tok(path)\n"
    ),
    "torchtune/_recipe_registry.py": (
        "_ALL_RECIPES = [Recipe(name='lora_single', file_path='lora_single.py',\n"
        "    configs=[Config(name='fam/1B_lora', file_path='fam/1B_lora.yaml')],\n"
        "    supports_distributed=False)]\n"
    ),
    "recipes/lora_single.py": (
        "PROFILER_KEY = 'profiler'\n"
        "class R:\n"
        "    def __init__(self, cfg):\n"
        "        self.bs = cfg.batch_size\n"
        "        self.clip = cfg.get('clip_grad_norm', None)\n"
        "        self.p = cfg.get(PROFILER_KEY, None)\n"
        "        if cfg.get('run_val'):\n"
        "            self.val = cfg.dataset_val\n"
        "    def _setup_model(self, cfg_model):\n"
        "        self.rank = cfg_model.lora_rank\n"
    ),
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("torchtune")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env)
    out = root / "out.json"
    argv = [str(SCRIPT), "--git-dir", str(root / ".git"), "--out", str(out), "--tags", ""]
    proc = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, object] = json.loads(out.read_text())
    return data


def test_builders_follow_component_builders_partials_and_aliases(
    generated: dict[str, object],
) -> None:
    builders = generated["builders"]
    assert isinstance(builders, dict)
    base = builders["torchtune.models.fam.fam_1b"]
    # positional arguments bound to the component's parameters, its defaults filled in
    assert base["shape"] == {
        "vocab_size": 32000,
        "num_layers": 16,
        "num_heads": 8,
        "embed_dim": 2048,
        "max_seq_len": 4096,
        "rope_base": 10000.0,
        "tie_word_embeddings": True,
    }
    assert base["component"] == "torchtune.models.fam._component_builders.fam"
    assert (
        base["lora"] is False
        and builders["torchtune.models.fam.fam_big"]["shape"] == (base["shape"])
    )
    lora = builders["torchtune.models.fam.lora_fam_1b"]
    assert lora["lora"] is True and lora["shape"]["quantize_base"] is False
    assert lora["signature"]["params"][0] == "lora_attn_modules"
    assert lora["signature"]["required"] == ["lora_attn_modules"]
    qlora = builders["torchtune.models.fam.qlora_fam_1b"]
    assert qlora["shape"]["quantize_base"] is True
    assert qlora["signature"]["defaults"]["quantize_base"] is True
    assert "torchtune.models.fam.fam_tokenizer" not in builders


def test_components_recipes_and_registry(generated: dict[str, object]) -> None:
    components = generated["components"]
    assert isinstance(components, dict)
    tokenizer = components["torchtune.models.fam.fam_tokenizer"]
    assert tokenizer["required"] == ["path"] and tokenizer["var_kwargs"] is False
    recipes = generated["recipes"]
    assert isinstance(recipes, dict)
    recipe = recipes["lora_single"]
    assert recipe["keys"] == ["batch_size", "clip_grad_norm", "dataset_val", "profiler", "run_val"]
    # read only under an `if`, or with a default: not required
    assert recipe["required"] == ["batch_size"]
    assert recipe["model_required"] == ["lora_rank"]
    assert generated["registry"] == {
        "lora_single": {"configs": ["fam/1B_lora.yaml"], "supports_distributed": False}
    }


def test_the_committed_data_serves_the_published_configs() -> None:
    import yaml

    assert tt.source().startswith("pytorch/torchtune at ")
    for config in sorted((NATIVE / "torchtune").glob("*.yaml")):
        data = yaml.safe_load(config.read_text())
        builder = (data.get("model") or data["policy_model"])["_component_"]
        stale = config.name == "broken_qwen2_5_14B_to_7B_KD_lora_single_device.yaml"
        assert (tt.builder(builder) is None) == stale, config.name
    assert Path(SCRIPT).is_file()


def test_release_tables_come_from_their_tags() -> None:
    """keys/torchtune_versions.json: each release people pin, from its tag's commit, applied
    onto main's tables (scripts/gen_torchtune_builders.py --tags)."""
    from cfgcheck.sources import torchtune_versions as tv

    commits = {
        "0.5.0": "0bb00a47b12b7a900ed797d1f9a2ff5a997774c3",
        "0.6.0": "235c0fe238eda6627bdec8628c862d249c8f61e4",
        "0.6.1": "a6290a5b40758f13bca61c386bc8756a49ef417e",
        "0.7.0": "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1",  # main, version.txt 0.7.0
    }
    assert tv.versions() == list(commits)
    for version, commit in commits.items():
        assert tt.source(version) == f"pytorch/torchtune at {commit}"
    loss = "torchtune.modules.loss.LinearCrossEntropyLoss"
    assert [v for v in commits if tt.component(loss, v) is not None] == ["0.7.0"]
    recipe = "lora_finetune_single_device"
    reads = [v for v in commits if "log_level" in (tt.recipe_keys(recipe, v) or {})["keys"]]
    assert reads == ["0.7.0"]
    # every check cfgcheck quotes is in the code of every version
    for version in commits:
        assert all(tt.data(version)["checks"].values()), version
    # qwen3 arrived after 0.6.1
    assert tt.builder("torchtune.models.qwen3.qwen3_0_6b_instruct", "0.6.1") is None
    assert tt.builder("torchtune.models.qwen3.qwen3_0_6b_instruct") is not None
