"""The static reader of training code (cfgcheck.sources.code): notebook cells, literal
propagation, the call matcher, and its bounds. Nothing it reads is ever executed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources.code import Known, Unknown, parse_code, read_code, read_program
from cfgcheck.sources.code.text import MAX_AST_DEPTH, python_of_cell
from cfgcheck.sources.code.values import Obj


def program(text: str, name: str = "train.py"):  # type: ignore[no-untyped-def]
    return read_program(parse_code(text, name))


def kwarg(text: str, callee: str, keyword: str) -> object:
    (call,) = program(text).find(callee)
    return call.kwargs[keyword].value


def test_module_constants_arithmetic_fstrings_and_dicts() -> None:
    text = """
from transformers import TrainingArguments
BASE = 2
GA = BASE * 4 - 1
NAME = "run"
extra = {"learning_rate": 2e-4, "warmup_steps": 5}
args = TrainingArguments(
    per_device_train_batch_size=BASE ** 2,
    gradient_accumulation_steps=GA,
    output_dir=f"outputs/{NAME}-{BASE:03d}",
    **extra,
)
"""
    (call,) = program(text).find("TrainingArguments")
    values = {k: a.value for k, a in call.kwargs.items()}
    assert values["per_device_train_batch_size"] == Known(
        4, values["per_device_train_batch_size"].origin
    )  # type: ignore[union-attr]
    assert isinstance(values["gradient_accumulation_steps"], Known)
    assert values["gradient_accumulation_steps"].value == 7
    assert values["output_dir"].value == "outputs/run-002"  # type: ignore[union-attr]
    assert values["learning_rate"].value == 2e-4  # type: ignore[union-attr]
    assert call.name == "transformers.TrainingArguments"


def test_keyword_arguments_through_a_function_the_file_defines() -> None:
    text = """
from trl import SFTConfig
def make_args(batch, **kw):
    steps = 8 // batch
    return SFTConfig(per_device_train_batch_size=batch, gradient_accumulation_steps=steps, **kw)
config = make_args(4, learning_rate=1e-4)
"""
    (call,) = program(text).find("SFTConfig")
    assert call.kwargs["per_device_train_batch_size"].value.value == 4  # type: ignore[union-attr]
    assert call.kwargs["gradient_accumulation_steps"].value.value == 2  # type: ignore[union-attr]
    assert call.kwargs["learning_rate"].value.value == 1e-4  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ('int(os.environ["BATCH"])', "os.environ"),
        ('int(os.getenv("BATCH", "4"))', "os.getenv"),
        ("int(input())", "input()"),
        ("len(dataset) // 10", "len(dataset) // 10"),
    ],
)
def test_anything_else_is_unknown_with_its_line(expression: str, why: str) -> None:
    text = (
        f"import os\nfrom transformers import TrainingArguments\nbs = {expression}\n"
        "TrainingArguments(per_device_train_batch_size=bs)\n"
    )
    value = kwarg(text, "TrainingArguments", "per_device_train_batch_size")
    assert isinstance(value, Unknown), value
    assert why in value.why
    assert value.location is not None and value.location.line == 3


def test_if_false_blocks_are_dead_code_and_unknown_conditions_merge() -> None:
    text = """
from unsloth import FastLanguageModel
import random
if False:
    FastLanguageModel.from_pretrained(model_name="lora_model")
if random.random() > 0.5:
    length = 1024
else:
    length = 2048
FastLanguageModel.from_pretrained(model_name="unsloth/llama-3-8b", max_seq_length=length)
"""
    calls = program(text).find("FastLanguageModel.from_pretrained")
    assert len(calls) == 1
    value = calls[0].kwargs["max_seq_length"].value
    assert isinstance(value, Unknown) and "depending on the condition" in value.why


def test_methods_of_a_class_read_with_its_init() -> None:
    text = """
import lightning as L
from torch.utils.data import DataLoader
class Data(L.LightningDataModule):
    def __init__(self, batch_size=8):
        self.batch_size = batch_size
    def train_dataloader(self):
        return DataLoader(self.ds, batch_size=self.batch_size)
Data(batch_size=2)
"""
    (call,) = program(text).find("DataLoader")
    assert call.kwargs["batch_size"].value.value == 2  # type: ignore[union-attr]
    assert call.name == "torch.utils.data.DataLoader"


def test_notebook_cells_magics_and_locations(tmp_path: Path) -> None:
    cells = [
        {"cell_type": "markdown", "source": ["# title"]},
        {"cell_type": "code", "source": ["%%capture\n", "!pip install unsloth\n", "import os\n"]},
        {"cell_type": "code", "source": ["%%bash\n", "echo hi\n"]},
        {
            "cell_type": "code",
            "source": [
                "from trl import SFTConfig\n",
                "if True:\n",
                "    !nvidia-smi\n",
                "%pip install trl\n",
                "SFTConfig(per_device_train_batch_size=2)\n",
            ],
        },
    ]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {"colab": {"gpuType": "T4"}}}))
    code = read_code(path, "nb.ipynb")
    assert [u.cell for u in code.units] == [1, 3]  # markdown and %%bash cells are not Python
    assert code.gpu == "T4"
    (call,) = read_program(code).find("SFTConfig")
    location = call.kwargs["per_device_train_batch_size"].location
    assert (location.file, location.cell, location.line) == ("nb.ipynb", 3, 5)
    assert str(location) == "nb.ipynb, cell 3, line 5"


def test_shell_lines_keep_line_numbers() -> None:
    assert python_of_cell("x = 1\n!ls \\\n  -l\ny = 2") == "x = 1\npass\n\ny = 2"
    assert python_of_cell("%%writefile a.py\nprint(1)") is None


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        ("def f(:\n", "train.py", "train.py:1: invalid Python"),
        ('{"cells": [', "nb.ipynb", "nb.ipynb is not a notebook"),
        (
            '{"cells": [{"cell_type": "code", "source": "x = (\\n"}]}',
            "nb.ipynb",
            "nb.ipynb, cell 0, line 1: invalid Python",
        ),
        ("x = " + "(" * 300 + ")" * 300, "deep.py", "deep.py"),
        (
            "x = " + "[" * (MAX_AST_DEPTH + 5) + "]" * (MAX_AST_DEPTH + 5),
            "deep2.py",
            "nested deeper",
        ),
    ],
)
def test_unreadable_code_is_one_line(text: str, name: str, message: str) -> None:
    with pytest.raises(ConfigLoadError) as e:
        read_program(parse_code(text, name))
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_a_call_result_is_known_only_as_that_call() -> None:
    text = (
        "from transformers import TrainingArguments\nbs = get_batch()\n"
        "TrainingArguments(per_device_train_batch_size=bs)\n"
    )
    value = kwarg(text, "TrainingArguments", "per_device_train_batch_size")
    assert isinstance(value, Obj) and value.call.name == "get_batch"


def test_nothing_is_executed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    text = f"open({str(marker)!r}, 'w').write('x')\nimport os\nos.system('touch {marker}')\n"
    read_program(parse_code(text, "evil.py"))
    assert not marker.exists()


SEED_SCRIPT = (
    Path(__file__).resolve().parent / "native" / "python" / "trainer_seed.py"
).read_text()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mangled_code_is_read_or_refused_in_one_line(data: st.DataObject) -> None:
    """Cut, duplicate and splice the seed script anywhere: the reader and the python source
    either read it or raise ConfigLoadError; never another exception."""
    from cfgcheck.sources.native import check_loaded
    from cfgcheck.sources.python import load_text

    text = SEED_SCRIPT
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 80)))
        action = data.draw(st.sampled_from(["cut", "dup", "junk"]))
        if action == "cut":
            text = text[:i] + text[j:]
        elif action == "dup":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = (
                text[:i]
                + data.draw(st.text(alphabet="()[]{}=*,.:\"' \nab1_%!", max_size=12))
                + text[i:]
            )
    notebook = data.draw(st.booleans())
    if notebook:
        text = json.dumps({"cells": [{"cell_type": "code", "source": text}]})
    try:
        read_program(parse_code(text, "x.ipynb" if notebook else "x.py"))
        check_loaded(load_text(text, "x.ipynb" if notebook else "x.py", verify=False))
    except ConfigLoadError as e:
        assert "\n" not in str(e)
