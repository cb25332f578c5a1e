"""The generators of LitGPT's and Axolotl's key tables (scripts/litgpt_keys.py,
scripts/axolotl_plugin_keys.py) read the fields the frameworks declare, on sources written
as upstream writes them (litgpt/args.py v0.3.1's TrainArgs; integrations/swanlab/args.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ARGS_V031 = '''
@dataclass
class TrainArgs:
    """Training related arguments"""

    save_interval: Optional[int] = 1000
    learning_rate: float = 1e-3
    beta1: float = 0.9

    def gradient_accumulation_iters(self, devices: int) -> int:
        return 1


@dataclass
class EvalArgs:
    interval: int = 600
'''

SETUP = """
def setup(
    checkpoint_dir: Path,
    devices: Union[int, str] = 1,
    train: TrainArgs = TrainArgs(),
) -> None:
    pass
"""

SWANLAB = """
class SwanLabConfig(BaseModel):
    use_swanlab: bool | None = Field(default=True)
    swanlab_project: str | None = Field(default=None, alias="swanlab_project_name")
    model_config = ConfigDict(extra="allow")
"""


def test_litgpt_generator_reads_setup_and_the_args_dataclasses() -> None:
    gen = _load("litgpt_keys")
    assert gen.setup_params(SETUP) == ["checkpoint_dir", "devices", "train"]
    assert gen.dataclass_fields(ARGS_V031) == {
        "train": ["save_interval", "learning_rate", "beta1"],
        "eval": ["interval"],
    }
    assert gen.version_key("v0.4.10") > gen.version_key("v0.4.9")


def test_axolotl_generator_reads_plugin_fields_and_aliases() -> None:
    gen = _load("axolotl_plugin_keys")
    assert gen.fields(SWANLAB) == ["swanlab_project", "swanlab_project_name", "use_swanlab"]
