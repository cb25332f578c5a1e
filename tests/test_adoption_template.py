"""Proof on a real public Hydra project: a copy of ashleve/lightning-hydra-template's configs
with only a ``cfgcheck:`` mapping node added (tests/data/lightning_hydra_template/SOURCES.md).

Its tree passes untouched; the four seed failures, planted in the template's own keys, are
caught at the template's own file:line with fixes in its own keys (each fix passes); and
``@cfgcheck.main`` runs its task, or refuses a planted failure before the task starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cfgcheck
from cfgcheck.findings import Finding
from cfgcheck.project.settings import NONE
from tests.adoption import line_of, run_in
from tests.conftest import REPO

TEMPLATE = REPO / "tests" / "data" / "lightning_hydra_template" / "configs"
# hydra-colorlog, which the template's hydra/default.yaml selects, is not installed (SOURCES.md).
LOGGING = ["hydra/job_logging=default", "hydra/hydra_logging=default"]


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    shutil.copytree(TEMPLATE, tmp_path / "configs")
    return tmp_path / "configs"


def plant(file: Path, old: str, new: str) -> int:
    """Replace ``old`` by ``new`` in the template's own file; the line it is on."""
    text = file.read_text()
    assert text.count(old) == 1, old
    file.write_text(text.replace(old, new))
    return line_of(file, new.strip())


def check(configs: Path, *overrides: str) -> cfgcheck.CheckResult:
    return cfgcheck.check(configs, "train", [*LOGGING, *overrides], settings=NONE)


def error(result: cfgcheck.CheckResult, rule: str) -> Finding:
    [finding] = [f for f in result.errors if f.rule == rule]
    return finding


def at(finding: Finding, path: str, file: Path, line: int) -> None:
    where = finding.locations.get(path)
    assert where is not None, (path, finding.locations)
    assert Path(where.file).resolve() == file.resolve() and where.line == line, where


def fixes_pass(configs: Path, finding: Finding, overrides: tuple[str, ...] = ()) -> None:
    assert finding.fixes
    for fix in finding.fixes:
        assert check(configs, *overrides, *fix.overrides).ok, fix


def test_template_passes_untouched(configs: Path) -> None:
    result = check(configs)
    assert result.ok and not result.errors, [f.message for f in result.findings]
    assert result.config is not None
    assert result.config.trainer.micro_batch_size == 128  # ${data.batch_size}
    assert result.config.data.max_seq_length == 784  # ${model.net.input_size}
    assert result.config.name == "train"  # ${task_name}
    proc = run_in(configs.parent, "check", "--config-dir", "configs", "--config-name", "train",
                  *LOGGING)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_seed_seq_len_over_block_size_in_its_model_file(configs: Path) -> None:
    model = configs / "model" / "mnist.yaml"
    line = plant(model, "input_size: 784", "input_size: 3063")
    finding = error(check(configs), "seq-len-over-block-size")
    assert "Cannot attend to 3063, block size is only 2048" in finding.message
    assert "model.net.input_size" in finding.paths
    at(finding, "model.net.input_size", model, line)
    assert finding.fixes[0].overrides == ("model.net.input_size=2048",)
    fixes_pass(configs, finding)


def test_seed_vocab_mismatch_in_its_model_file(configs: Path) -> None:
    model = configs / "model" / "mnist.yaml"
    line = plant(model, "output_size: 10", "output_size: 9")
    finding = error(check(configs), "vocab-mismatch")
    assert "index out of range" in finding.message
    at(finding, "model.net.output_size", model, line)
    assert finding.fixes[0].overrides == ("model.net.output_size=10",)
    fixes_pass(configs, finding)


@pytest.mark.parametrize(
    ("node", "needle"),
    [
        # Unsloth / FastChat: padding=True pads per call, batch > 1 breaks.
        (["cfgcheck.data.padding=longest", "cfgcheck.data.collator=default"], "expected sequence"),
        # torchtune + Lightning: default_collate on ragged samples.
        (
            ["cfgcheck.data.padding=do_not_pad", "cfgcheck.data.collator=default"],
            "equal size",
        ),
    ],
    ids=["padding-true", "default-collate"],
)
def test_seed_ragged_batch_at_its_batch_size(configs: Path, node: list[str], needle: str) -> None:
    data = configs / "data" / "mnist.yaml"
    line = plant(data, "batch_size: 128", "batch_size: 4")
    finding = error(check(configs, *node), "ragged-batch")
    assert needle in finding.message
    at(finding, "data.batch_size", data, line)
    fixes = [o for fix in finding.fixes for o in fix.overrides]
    assert all(o.split("=")[0] in ("data.batch_size", *[n.split("=")[0] for n in node],
                                   "cfgcheck.data.truncation") for o in fixes), fixes  # fmt: skip
    fixes_pass(configs, finding, tuple(node))


def test_seed_failure_from_its_command_line_and_a_sweep(configs: Path) -> None:
    finding = error(check(configs, "model.net.input_size=3063"), "seq-len-over-block-size")
    where = finding.locations["model.net.input_size"]
    assert where is not None and where.file == "<override model.net.input_size=3063>"
    proc = run_in(configs.parent, "check", "--sweep", "--config-dir", "configs", "--config-name",
                  "train", "--format", "json", *LOGGING,
                  "model.net.input_size=784,3063")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    points = json.loads(proc.stdout)["points"]
    assert [p["ok"] for p in points] == [True, False]
    assert points[1]["findings"][0]["paths"][0] == "model.net.input_size"


def test_its_example_experiment_passes(configs: Path) -> None:
    result = check(configs, "experiment=example")
    assert result.ok and result.config is not None
    assert result.config.trainer.micro_batch_size == 64  # the experiment's data.batch_size


APP = """
import os
from pathlib import Path

import cfgcheck
from cfgcheck.hydra import current_dictconfig


@cfgcheck.main(version_base="1.3", config_path="../configs", config_name="train.yaml")
def main(run):
    cfg = current_dictconfig()  # the template's own config, for everything cfgcheck does not own
    Path(os.environ["MARKER"]).write_text(
        f"{type(run).__name__} {run.trainer.micro_batch_size} {cfg.model.net.input_size} "
        f"{cfg.trainer._target_}"
    )


if __name__ == "__main__":
    main()
"""


def run_app(root: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PROJECT_ROOT": str(root),  # the template's rootutils sets it
        "MARKER": str(root / "ran"),
        "NO_COLOR": "1",
    }
    return subprocess.run(
        [sys.executable, "src/train.py", *LOGGING, *overrides],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_hydra_main_runs_its_task_and_refuses_a_planted_failure(configs: Path) -> None:
    root = configs.parent
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(APP)
    proc = run_app(root)
    assert proc.returncode == 0, proc.stderr
    assert (root / "ran").read_text() == "RunConfig 128 784 lightning.pytorch.trainer.Trainer"
    assert (root / "logs" / "train" / "runs").is_dir()  # the template's own hydra.run.dir

    (root / "ran").unlink()
    model = configs / "model" / "mnist.yaml"
    line = plant(model, "input_size: 784", "input_size: 3063")
    proc = run_app(root)
    assert proc.returncode == 1 and not (root / "ran").exists()
    assert f"model/mnist.yaml:{line}: model.net.input_size set here" in proc.stderr
    assert "fix: model.net.input_size=2048" in proc.stderr
