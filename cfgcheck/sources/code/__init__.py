"""The static reader of training code, shared by every source whose configuration is Python.

A run written as code (an Unsloth notebook, a Trainer script, a Lightning module: ``--from
python``), and the entry point a launch script starts, are read here with :mod:`ast`: never
imported, never executed. Three layers, each usable alone:

- :mod:`~cfgcheck.sources.code.text`: the file as code units: a script is one unit, a
  notebook's code cells are units in order (magics and shell lines blanked, line numbers
  kept), each parsed with its location (file, cell, line); bounded in bytes, cells, AST depth.
- :mod:`~cfgcheck.sources.code.values`: a literal propagator. Module constants, arithmetic,
  f-strings of literals, dict literals unpacked with ``**``, and keyword arguments passed
  through a function the file defines, are followed; anything else (a call's result,
  ``os.environ``, ``input()``) is an :class:`~cfgcheck.sources.code.values.Unknown` with its
  line, never a guess.
- :mod:`~cfgcheck.sources.code.calls` (with :mod:`~cfgcheck.sources.code.expressions` and
  :mod:`~cfgcheck.sources.code.walker`): the call matcher. It walks the units in execution
  order and records every call with its callee's dotted name as the imports spell it
  (``unsloth.FastLanguageModel.from_pretrained``), its arguments' values and locations, and
  the functions a call hands over (``dataset.map(fn)``), whose bodies are read too.

- :mod:`~cfgcheck.sources.code.datapath`: what the calls of a data path mean to every source
  (a tokenizer call; a collator that pads or stacks).

Which section a keyword argument fills belongs to the source that uses the reader
(:mod:`cfgcheck.sources.python` for a run written as code; a launch script's entry point reads
its argument dataclasses and data path with the same :func:`read_program`).
"""

from cfgcheck.sources.code.calls import Arg, CallSite, Program, read_program
from cfgcheck.sources.code.text import CodeFile, Unit, parse_code, read_code
from cfgcheck.sources.code.values import Known, Unknown, Value

__all__ = [
    "Arg",
    "CallSite",
    "CodeFile",
    "Known",
    "Program",
    "Unit",
    "Unknown",
    "Value",
    "parse_code",
    "read_code",
    "read_program",
]
