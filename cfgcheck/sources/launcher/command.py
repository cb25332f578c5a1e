"""The training command of a launch script: the launcher, its flags, the entry point, and the
flags the entry point gets.

Launchers and their flags: torchrun / ``python -m torch.distributed.run`` (``--nproc_per_node``,
``--nnodes``; torch/distributed/run.py), ``deepspeed`` (``--num_gpus``, ``--num_nodes``,
``--include``; deepspeed/launcher/runner.py), ``accelerate launch`` (``--num_processes``,
``--num_machines``, ``--config_file``; accelerate/commands/launch.py), plain ``python`` /
``python -m``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cfgcheck.sources.launcher.shell import Command, Script, Word

PYTHONS = ("python", "python3")
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# Launcher flags that take no value (every other launcher flag takes the next word).
NO_VALUE = frozenset(
    {
        "--standalone",
        "--no_python",
        "--no-python",
        "--module",
        "-m",
        "--use_env",
        "--no_local_rank",
        "--multi_gpu",
        "--use_deepspeed",
        "--use_fsdp",
        "--cpu",
        "--mixed_precision",
        "--autotune",
        "--force_multi",
        "--no_ssh_check",
    }
)
# Launcher flags -> what they state: (devices per node | nodes | accelerate config).
DEVICE_FLAGS = ("--nproc_per_node", "--nproc-per-node", "--num_gpus", "--num_processes")
NODE_FLAGS = ("--nnodes", "--num_nodes", "--num_machines")


@dataclass
class Flag:
    name: str  # without the leading dashes
    value: str | None  # None: given with no value
    word: Word  # the flag's word (its line)
    value_word: Word | None = None


@dataclass
class Launch:
    command: Command
    launcher: str  # "torchrun", "deepspeed", "accelerate", "python"
    entry: str  # the entry point as written (a path, or a module for python -m)
    module: bool
    entry_word: Word
    launcher_flags: dict[str, Flag] = field(default_factory=dict)
    flags: list[Flag] = field(default_factory=list)

    @property
    def line(self) -> int:
        return self.command.line


def _launcher(words: list[Word]) -> tuple[str, int] | None:
    """(launcher, index of its first own flag) of a command, or None."""
    head = words[0].text.rsplit("/", 1)[-1]
    if head in ("torchrun", "deepspeed"):
        return head, 1
    if head == "accelerate" and len(words) > 1 and words[1].text == "launch":
        return "accelerate", 2
    if head.startswith(PYTHONS):
        if len(words) > 2 and words[1].text == "-m" and words[2].text in TORCHRUN_MODULES:
            return "torchrun", 3
        return "python", 1
    return None


def find_launches(script: Script) -> list[Launch]:
    """Every command of ``script`` that starts a Python entry point through a launcher."""
    out = []
    for command in script.commands:
        words = command.words
        found = _launcher(words)
        if found is None:
            continue
        launcher, i = found
        flags: dict[str, Flag] = {}
        entry: Word | None = None
        module = False
        while i < len(words):
            word = words[i]
            text = word.text
            if launcher == "python" and text == "-m" and i + 1 < len(words):
                entry, module = words[i + 1], True
                i += 2
                break
            if text.startswith("-"):
                name, sep, value = text.partition("=")
                if sep:
                    flags[name.lstrip("-")] = Flag(name.lstrip("-"), value, word)
                    i += 1
                elif name in NO_VALUE or launcher == "python" or i + 1 >= len(words):
                    flags[name.lstrip("-")] = Flag(name.lstrip("-"), None, word)
                    i += 1
                else:
                    nxt = words[i + 1]
                    flags[name.lstrip("-")] = Flag(name.lstrip("-"), nxt.text, word, nxt)
                    i += 2
                continue
            entry = word
            i += 1
            break
        if entry is None or not (module or entry.text.endswith(".py")):
            continue
        launch = Launch(command, launcher, entry.text, module, entry, flags)
        launch.flags = script_flags(words[i:])
        out.append(launch)
    return out


def script_flags(words: list[Word]) -> list[Flag]:
    """``--name value`` / ``--name=value`` / ``--name`` (no value) as the entry point's parser
    would split them; which ones take a value is decided later, from the parser's fields."""
    out: list[Flag] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.unknown and word.text == "$@":  # the script's arguments, not known
            i += 1
            continue
        if not word.text.startswith("-"):
            if out and out[-1].value is not None:
                out[-1].value += " " + word.text  # nargs="+": kept together
            elif out:
                out[-1].value, out[-1].value_word = word.text, word
            i += 1
            continue
        name, sep, value = word.text.lstrip("-").partition("=")
        if sep:
            out.append(Flag(name, value, word, word))
        elif i + 1 < len(words) and not _is_flag(words[i + 1].text):
            out.append(Flag(name, words[i + 1].text, word, words[i + 1]))
            i += 1
        else:
            out.append(Flag(name, None, word))
        i += 1
    return out


def _is_flag(text: str) -> bool:
    return text.startswith("--") or (text.startswith("-") and not _number(text))


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
