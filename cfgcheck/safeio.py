"""Reading untrusted files and text, bounded and total: one place for every reader.

Everything a user (or a client of the service) hands cfgcheck goes through here before a
parser or a library sees it:

- :func:`path_problem` / :func:`require_file` say in one line why a path cannot be read
  (a directory, a device, a FIFO, a socket, a dangling symlink, a symlink loop, a name too
  long, no permission) *before* anything opens it: opening a FIFO blocks forever and
  ``/dev/zero`` never ends.
- :func:`read_bytes` reads a regular file up to a size limit (non-blocking open, re-checked
  on the open descriptor, so a file swapped for a FIFO between the check and the open fails
  instead of hanging).
- :func:`decode` accepts UTF-8 (with or without a BOM) and names anything else in one line
  (UTF-16, latin-1, cp1252, binary).
- :func:`screen_yaml` walks libyaml's *event stream* (no recursion, no object built) and stops
  at the first bound crossed: nesting depth, block and flow styles alike (PyYAML's C composer
  recurses on the C stack and a 60 KB ``- - - ...`` document kills the process), the node
  count with every alias expanded (a 1 KB alias bomb), aliases, keys of one mapping, key and
  document size, and tags (``!!binary``, ``!!python/...`` and custom tags are not config
  data). Only a screened document reaches a loader: Hydra's own, or :func:`load_yaml_text`.
- :func:`load_json_text` bounds JSON nesting with a linear scan before :func:`json.loads`,
  refuses ``NaN``/``Infinity`` and duplicate-free huge trees.
- :func:`check_plain` bounds a parsed tree (depth, nodes, JSON-only values, string keys,
  integer size) without recursion.
- :func:`confine` is the service's path confinement: a path a request names must resolve,
  symlinks followed, inside one of the allowed roots, and so must every entry of a folder a
  library will be given (transformers reads a whole tokenizer folder). Callers with a folder
  to hand to a library (``model.pretrained`` folders, tokenizer folders) call
  :func:`confine` with ``folder_entries=True``.

Every failure is :class:`UnsafeInput`, a :class:`~cfgcheck.errors.ConfigLoadError` with a
one-line message: the CLI exits 2 on it and the service answers 4xx.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfgcheck.errors import ConfigLoadError


class UnsafeInput(ConfigLoadError):
    """Input refused or unreadable: the message is one line naming the file and the reason."""


@dataclass(frozen=True)
class Limits:
    """Bounds on one document. The defaults fit every real config by a wide margin."""

    max_bytes: int = 4_000_000
    max_depth: int = 64
    max_nodes: int = 200_000  # scalars + collections, every alias expanded
    max_aliases: int = 1_000
    max_keys: int = 20_000  # keys of one mapping
    max_key_chars: int = 1_000
    max_int_digits: int = 100  # an int with more digits is not a config value


DEFAULT_LIMITS = Limits()
_MAX_CONFIG_FILES = 10_000

# -- size caps per kind of file -----------------------------------------------------------------


@dataclass(frozen=True)
class FileCap:
    """The most bytes cfgcheck reads from one file of a kind, and the environment variable
    that changes it (``CFGCHECK_MAX_<KIND>_BYTES``, a number of bytes)."""

    kind: str
    default: int
    what: str

    @property
    def env(self) -> str:
        return "CFGCHECK_MAX_" + self.kind.upper().replace("-", "_") + "_BYTES"

    def limit(self) -> int:
        raw = os.environ.get(self.env, "").strip()
        if raw.isdigit() and int(raw) > 0:
            return int(raw)
        return self.default


_MIB = 1 << 20
# The largest real files of each kind, for scale: a config.json of a few KiB (id2label tables
# stay under 1 MiB); Gemma 3's tokenizer.json 33 MiB and its tokenizer_config.json 1.2 MiB;
# SentencePiece models of 0.5 to 5 MiB; a million-token training sample about 4 MiB of text.
# Tokenizing costs about 300 bytes of memory per character of one record (measured with
# ``tokenizers`` on CPU), so the record cap bounds the data scan's memory too.
CAPS: dict[str, FileCap] = {
    cap.kind: cap
    for cap in (
        FileCap("config", 4 * _MIB, "a config file (YAML, JSON, TOML, a native config)"),
        FileCap("model-config", 4 * _MIB, "a model folder's config file"),
        FileCap("tokenizer", 64 * _MIB, "a tokenizer.json or tokenizer side file"),
        FileCap("sentencepiece", 32 * _MIB, "a SentencePiece tokenizer.model or vocabulary"),
        FileCap("record", 4 * _MIB, "one dataset record (a JSONL or text line, a rendered sample)"),
        FileCap("json-array", 512 * _MIB, "a dataset file holding one JSON array"),
        FileCap("row-group", 512 * _MIB, "one column of a Parquet row group, read at once"),
    )
}


def cap(kind: str) -> int:
    """The byte cap of ``kind`` (see :data:`CAPS`), its environment variable applied."""
    return CAPS[kind].limit()


def over_cap(kind: str, size: int, where: str) -> UnsafeInput:
    """The refusal of ``size`` bytes of ``kind`` (one line naming the cap and its variable)."""
    c = CAPS[kind]
    return UnsafeInput(
        f"{where} is larger than {c.limit():,} bytes, the cap for {c.what} ({size:,} bytes); "
        f"not read (set {c.env} to change it)"
    )


def require_capped(path: str | Path, kind: str, *, what: str = "") -> Path:
    """``path`` when it is a regular file within the cap of ``kind`` (its size as the file
    system states it: a sparse 2.5 GB file is refused before any byte is read)."""
    p = require_file(path, what=what)
    try:
        size = os.stat(p).st_size
    except OSError as e:
        raise UnsafeInput(f"{shown(p)} {_os_reason(p, e)}") from e
    if size > cap(kind):
        raise over_cap(kind, size, shown(p))
    return p


def read_capped(path: str | Path, kind: str) -> bytes:
    """:func:`read_bytes` with the cap of ``kind``; a file over it is refused by its stated
    size first, so nothing of it is read."""
    p = require_capped(path, kind)
    try:
        return read_bytes(p, cap(kind))
    except UnsafeInput as e:
        if "is larger than" in str(e):  # grew (or a /proc file) while it was read
            raise over_cap(kind, cap(kind) + 1, shown(p)) from None
        raise


# -- paths ------------------------------------------------------------------------------------


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "is a socket"
    return "is not a regular file"


def _os_reason(path: Path, e: OSError) -> str:
    if e.errno == errno.ENOENT:
        return "is a dangling symlink" if os.path.lexists(path) else "does not exist"
    if e.errno == errno.ELOOP:
        return "is a symlink loop"
    if e.errno == errno.ENAMETOOLONG:
        return "has a name that is too long"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "cannot be read: permission denied"
    if e.errno == errno.ENOTDIR:
        return "does not exist (a component of it is not a directory)"
    return f"cannot be read: {e.strerror or e}"


def path_problem(path: str | Path, *, allow_dir: bool = False) -> str | None:
    """Why ``path`` is not a readable regular file (or folder, with ``allow_dir``), as the
    end of a sentence (``"is a FIFO (named pipe)"``); ``None`` when it is fine. Never opens
    the path, so special files cannot block."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as e:
        return _os_reason(p, e)
    except ValueError:  # an embedded NUL byte
        return "is not a valid path (it contains a NUL byte)"
    if allow_dir and stat.S_ISDIR(st.st_mode):
        return None
    kind = _kind(st.st_mode)
    if kind is None and _pseudo(p):
        return "is a kernel pseudo-file (/proc, /sys): its size is not what it reads"
    return kind


_PSEUDO_ROOTS = ("/proc/", "/sys/")


def _pseudo(p: Path) -> bool:
    """A file of /proc or /sys (``/proc/self/pagemap`` says 0 bytes and reads gigabytes)."""
    try:
        real = os.path.realpath(p)
    except (OSError, ValueError):
        return False
    return real.startswith(_PSEUDO_ROOTS)


def shown(path: str | Path) -> str:
    """A path for a one-line message, printable whatever bytes its name holds."""
    return os.fsdecode(path).encode("utf-8", "backslashreplace").decode("utf-8")


def require_file(path: str | Path, *, allow_dir: bool = False, what: str = "") -> Path:
    """``path`` as a :class:`Path`, or :class:`UnsafeInput` saying why it cannot be read."""
    reason = path_problem(path, allow_dir=allow_dir)
    if reason:
        raise UnsafeInput(f"cannot read {what + ' ' if what else ''}{shown(path)}: it {reason}")
    return Path(path)


def read_bytes(path: str | Path, limit: int = DEFAULT_LIMITS.max_bytes) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (else UnsafeInput)."""
    p = require_file(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except OSError as e:
        raise UnsafeInput(f"{shown(p)} {_os_reason(p, e)}") from e
    try:
        st = os.fstat(fd)
        reason = _kind(st.st_mode)  # swapped for a FIFO since the check?
        if reason:
            raise UnsafeInput(f"{shown(p)} {reason}")
        if st.st_size > limit:  # a sparse file states its size: nothing of it is read
            raise UnsafeInput(f"{shown(p)} is larger than {limit} bytes; not read")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise UnsafeInput(f"{shown(p)} is larger than {limit} bytes; not read")
        return b"".join(chunks)
    except OSError as e:
        raise UnsafeInput(f"{shown(p)} {_os_reason(p, e)}") from e
    finally:
        os.close(fd)


# -- text ---------------------------------------------------------------------------------------


def decode(data: bytes, where: str) -> str:
    """UTF-8 text (a leading BOM dropped); one line naming the encoding problem otherwise."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(data) > 1 and b"\x00" in data[:2]):
        raise UnsafeInput(f"{where} is not UTF-8 (it looks like UTF-16); save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UnsafeInput(
            f"{where} is not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}; latin-1 or "
            f"cp1252?); save it as UTF-8"
        ) from None


def read_text(path: str | Path, limit: int = DEFAULT_LIMITS.max_bytes) -> str:
    """:func:`read_bytes` then :func:`decode`."""
    return decode(read_bytes(path, limit), shown(path))


# -- YAML ---------------------------------------------------------------------------------------

# YAML's own tags. Those that build something other than JSON data (binary, set, timestamp,
# omap, pairs) pass the screen and are refused by check_plain, which names the key.
_YAML_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}"
    for t in (
        "str",
        "int",
        "float",
        "bool",
        "null",
        "map",
        "seq",
        "binary",
        "set",
        "timestamp",
        "omap",
        "pairs",
        "merge",
        "value",
    )
)


def screen_yaml(text: str, where: str, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise :class:`UnsafeInput` if parsing ``text`` into objects could exhaust the C stack,
    memory or time, or would build something other than plain data. Linear in ``text``;
    libyaml's parser keeps its own stacks on the heap, so the event stream is safe to walk."""
    import yaml

    if len(text) > limits.max_bytes:
        raise UnsafeInput(f"{where} is larger than {limits.max_bytes} characters; not read")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    # per open collection: [children seen, is_mapping, expanded count at its start, anchor]
    stack: list[list[Any]] = []
    anchors: dict[str, int] = {}
    expanded = aliases = 0

    def refuse(what: str, event: Any) -> UnsafeInput:
        mark = getattr(event, "start_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        return UnsafeInput(f"{where}{line}: {what}; not read")

    def child(event: Any, size: int) -> None:
        nonlocal expanded
        expanded += size
        if expanded > limits.max_nodes:
            raise refuse(f"more than {limits.max_nodes} values once aliases are expanded", event)
        if stack:
            top = stack[-1]
            top[0] += 1
            if top[1] and top[0] > 2 * limits.max_keys:
                raise refuse(f"a mapping with more than {limits.max_keys} keys", event)

    def tag_ok(event: Any) -> None:
        tag = getattr(event, "tag", None)
        if tag not in (None, "!") and tag not in _YAML_TAGS:
            mark = event.start_mark
            raise UnsafeInput(
                f"malformed YAML in {where} (line {mark.line + 1}): the tag {tag!r} is not "
                f"accepted (python/... and custom tags construct objects; configs are plain data)"
            )

    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.ScalarEvent):
                tag_ok(event)
                is_key = bool(stack) and stack[-1][1] and stack[-1][0] % 2 == 0
                if is_key and len(event.value) > limits.max_key_chars:
                    raise refuse(f"a key longer than {limits.max_key_chars} characters", event)
                if event.anchor is not None:
                    anchors[event.anchor] = 1
                child(event, 1)
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > limits.max_aliases:
                    raise refuse(f"more than {limits.max_aliases} aliases", event)
                child(event, anchors.get(event.anchor or "", 1))
            elif isinstance(event, yaml.CollectionStartEvent):
                tag_ok(event)
                child(event, 1)
                if len(stack) >= limits.max_depth:
                    raise refuse(f"nesting deeper than {limits.max_depth} levels", event)
                stack.append([0, isinstance(event, yaml.MappingStartEvent), expanded, event.anchor])
            elif isinstance(event, yaml.CollectionEndEvent) and stack:
                _, _, start, anchor = stack.pop()
                if anchor is not None:
                    anchors[anchor] = expanded - start + 1
    except yaml.YAMLError as e:
        if "nesting depth" in str(getattr(e, "problem", "")):
            # PyYAML >= 6.0.4 stops deep flow nesting in its scanner, before the parser emits
            # the events counted above: the same bound crossed, so the same refusal.
            mark = getattr(e, "problem_mark", None)
            line = f" (line {mark.line + 1})" if mark is not None else ""
            raise UnsafeInput(
                f"{where}{line}: nesting deeper than the YAML parser allows; not read"
            ) from None
        raise UnsafeInput(f"malformed YAML in {where}: {_one_line(e)}") from None


def load_yaml_text(text: str, where: str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """The plain data of one YAML document, screened first (see :func:`screen_yaml`) and
    checked after (see :func:`check_plain`)."""
    import yaml

    screen_yaml(text, where, limits)
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        raise UnsafeInput(f"malformed YAML in {where}: {_one_line(e)}") from None
    except (ValueError, RecursionError, OverflowError) as e:  # ints over the digit limit
        raise UnsafeInput(f"{where}: cannot be read as YAML: {_one_line(e)}") from None
    check_plain(data, where, limits)
    return data


# -- JSON ---------------------------------------------------------------------------------------

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # unrolled: ~20x faster
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def json_depth(text: str) -> int:
    """The bracket nesting of JSON ``text`` (strings skipped), in linear time."""
    opening = text.count("[") + text.count("{")
    if opening <= 1:
        return opening
    brackets = _NOT_BRACKETS.sub("", _JSON_STRING.sub("", text))
    depth = deepest = 0
    for ch in brackets:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_json_text(text: str, where: str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """The data of a JSON document, nesting bounded before the parser runs."""
    if len(text) > limits.max_bytes:
        raise UnsafeInput(f"{where} is larger than {limits.max_bytes} characters; not read")
    if text.count("[") + text.count("{") > limits.max_depth and json_depth(text) > limits.max_depth:
        raise UnsafeInput(f"{where}: nesting deeper than {limits.max_depth} levels; not read")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise UnsafeInput(f"malformed JSON in {where}: {_one_line(e)}") from None
    check_plain(data, where, limits)
    return data


def load_file(path: str | Path, limits: Limits = DEFAULT_LIMITS) -> Any:
    """A YAML or JSON file (by suffix ``.json``) as plain data, every bound applied."""
    text = read_text(path, limits.max_bytes)
    if Path(path).suffix == ".json":
        return load_json_text(text, shown(path), limits)
    return load_yaml_text(text, shown(path), limits)


# -- parsed trees -------------------------------------------------------------------------------


def check_plain(tree: Any, where: str, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise :class:`UnsafeInput` unless ``tree`` is JSON data within ``limits``: string (or
    int/bool/null, as YAML writes them) keys, ints of bounded size, bounded depth and node
    count, each shared subtree (a YAML alias) counted every time it appears. The message
    names the offending key path."""
    stack: list[tuple[str, Any, int]] = [("<root>", tree, 1)]
    nodes = 0
    while stack:
        path, value, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise UnsafeInput(f"{where}: more than {limits.max_nodes} values; not read")
        if depth > limits.max_depth:
            raise UnsafeInput(
                f"{where}: nesting deeper than {limits.max_depth} levels (at {path}); not read"
            )
        if isinstance(value, dict):
            if len(value) > limits.max_keys:  # before its keys are walked one by one
                raise UnsafeInput(
                    f"{where}: {path} has {len(value):,} keys, more than {limits.max_keys:,}; "
                    "not read"
                )
            for key, child in value.items():
                if not isinstance(key, str | int | bool) and key is not None:
                    raise UnsafeInput(
                        f"{where}: {path} has a key of type {type(key).__name__}; not read"
                    )
                if isinstance(key, str) and len(key) > limits.max_key_chars:
                    raise UnsafeInput(
                        f"{where}: a key under {path} is longer than {limits.max_key_chars} "
                        f"characters; not read"
                    )
                if isinstance(key, str) and _SURROGATE.search(key):
                    raise UnsafeInput(
                        f"{where}: a key under {path} holds {_surrogate_text(key)}; not read"
                    )
                name = str(key) if len(str(key)) <= 80 else str(key)[:80] + "..."
                stack.append((name if path == "<root>" else f"{path}.{name}", child, depth + 1))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", child, depth + 1) for i, child in enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            if value.bit_length() > limits.max_int_digits * 3.33:
                raise UnsafeInput(
                    f"{where}: {path} is an integer of more than {limits.max_int_digits} "
                    f"digits; not read"
                )
        elif not isinstance(value, str | float | bool) and value is not None:
            raise UnsafeInput(
                f"{where}: {path} is a {type(value).__name__}; configs hold JSON values only "
                f"(mappings, lists, strings, numbers, booleans, null): quote it to send a string"
            )
        elif isinstance(value, str) and _SURROGATE.search(value):
            raise UnsafeInput(f"{where}: {path} holds {_surrogate_text(value)}; not read")


# A JSON ``\ud800`` escape (or a YAML one) decodes to a lone surrogate: not a character, so
# nothing can encode it (a file name, a tokenizer, a reply). Refused where the tree is checked.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_text(text: str) -> str:
    found = _SURROGATE.search(text)
    code = f"\\u{ord(found.group()):04x}" if found else "?"
    return f"a lone surrogate {code}, which is not a Unicode character"


# -- config directories -------------------------------------------------------------------------


def config_files(directory: Path) -> list[Path]:
    """Every ``*.yaml``/``*.yml`` Hydra may read under a config directory, sorted, symlinks
    followed as Hydra follows them, each one checked before anything reads it: a file or
    folder whose real path lies outside the directory (a link to a private key, a credentials
    file, another tree) is refused, so no content from outside is ever read or echoed; a
    special file (FIFO, device, dangling or looping link) is refused by :func:`require_file`.
    Link cycles inside the directory are walked once."""
    root = directory.resolve()
    found: list[Path] = []
    walked: set[Path] = set()
    for folder, dirs, files in os.walk(directory, followlinks=True, onerror=_raise_walk):
        real = Path(folder).resolve()
        if not real.is_relative_to(root):
            raise UnsafeInput(
                f"{shown(folder)} is a link to a folder outside the config directory "
                f"{shown(directory)}; not read"
            )
        if real in walked:  # a link back to a folder already walked
            dirs[:] = []
            continue
        walked.add(real)
        dirs.sort()
        for name in dirs:  # Hydra would take it for a config file of that name
            if name.endswith((".yaml", ".yml")):
                raise UnsafeInput(f"{shown(Path(folder, name))} is a directory, not a config")
        for name in sorted(files):
            if not name.endswith((".yaml", ".yml")):
                continue
            if len(found) >= _MAX_CONFIG_FILES:
                raise UnsafeInput(f"{shown(directory)} holds more than {_MAX_CONFIG_FILES} configs")
            path = Path(folder, name)
            require_file(path)
            if not path.resolve().is_relative_to(root):
                raise UnsafeInput(
                    f"{shown(path)} is a link to a file outside the config directory "
                    f"{shown(directory)}; not read"
                )
            found.append(path)
    return found


def screen_config_dir(
    directory: Path,
    limits: Limits = DEFAULT_LIMITS,
    *,
    read: Mapping[Path, bytes] | None = None,
) -> dict[Path, bytes]:
    """Screen every config file under a Hydra config directory (:func:`config_files`: links
    confined to the directory) before Hydra reads any (Hydra loads them with its own loader,
    unbounded): special files, encodings, and :func:`screen_yaml`'s bounds. Returns the bytes
    read, by path (``directory / "model" / "x.yaml"``), for a reader that needs them again
    (:mod:`cfgcheck.compose_plain`). ``read``: every file's bytes as :func:`config_files` and
    :func:`read_bytes` just gave them (the composition cache's key read them), screened
    without reading the tree again."""
    from cfgcheck.interpolation_cost import check_cost

    root = directory.resolve()
    screened: dict[Path, bytes] = {}
    for path in config_files(directory) if read is None else read:
        data = read_bytes(path, limits.max_bytes) if read is None else read[path]
        if len(data) > limits.max_bytes:
            raise UnsafeInput(f"{shown(path)} is larger than {limits.max_bytes} bytes; not read")
        text = decode(data, shown(path))
        screened[path] = data
        screen_yaml(text, shown(path), limits)
        if "${" in text:  # Hydra resolves hydra.searchpath and defaults while it composes
            group = path.resolve().parent.relative_to(root).parts
            prefixes = tuple(".".join(group[:i]) for i in range(len(group), 0, -1))
            check_cost(load_yaml_text(text, shown(path), limits), shown(path), prefixes=prefixes)
    return screened


def _raise_walk(e: OSError) -> None:
    where = Path(e.filename) if e.filename else Path("?")
    raise UnsafeInput(f"{shown(where)} {_os_reason(where, e)}")


# -- confinement --------------------------------------------------------------------------------

_REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_MAX_FOLDER_ENTRIES = 1000
_MAX_COMPONENT = 255


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def confinement_problem(
    value: str, roots: Sequence[Path], base: Path, *, folder_entries: bool = True
) -> str | None:
    """Why the path ``value`` (relative to ``base``) may not be read by a process confined to
    ``roots``, or ``None``. Refused: empty paths (they name ``base`` itself), NUL bytes,
    remote URLs, ``~``, ``..`` components, components over 255 bytes, anything resolving
    (symlinks followed) outside ``roots``, anything but a regular file or folder, and with
    ``folder_entries`` a folder holding an entry that fails those checks: a library given
    the folder (transformers' ``from_pretrained``) reads its files."""
    if not value.strip():
        return "is empty (it would name the working directory)"
    if "\x00" in value:
        return "contains a NUL byte"
    if _REMOTE.match(value):
        return "is a remote location; only local files are read, nothing is downloaded"
    if value.startswith("~"):
        return "starts with '~'; home-directory paths are not accepted"
    parts = re.split(r"[\\/]", value)
    if ".." in parts:
        return "has a '..' component; paths may not climb out of their directory"
    if any(len(part.encode("utf-8", "surrogateescape")) > _MAX_COMPONENT for part in parts):
        return f"has a component longer than {_MAX_COMPONENT} bytes"
    if len(value) > 4096:
        return "is longer than 4096 characters"
    try:
        resolved = Path(os.path.realpath(base / value))
    except (OSError, ValueError) as e:
        return f"cannot be resolved ({e})"
    if not _inside(resolved, roots):
        through = Path(os.path.abspath(base / value)) != resolved
        how = "leads through a symlink to" if through else "is"
        return f"{how} a location outside the directories this service may read"
    reason = path_problem(resolved, allow_dir=True)
    if reason and reason != "does not exist":
        return reason
    if folder_entries and resolved.is_dir():
        return _folder_problem(resolved, roots)
    return None


def _folder_problem(folder: Path, roots: Sequence[Path]) -> str | None:
    try:
        with os.scandir(folder) as it:
            entries = [e for _, e in zip(range(_MAX_FOLDER_ENTRIES + 1), it, strict=False)]
    except OSError as e:
        return _os_reason(folder, e)
    if len(entries) > _MAX_FOLDER_ENTRIES:
        return f"is a folder of more than {_MAX_FOLDER_ENTRIES} entries"
    for entry in entries:
        target = Path(os.path.realpath(entry.path))
        if entry.is_symlink() and not _inside(target, roots):
            return f"is a folder whose entry {entry.name!r} leads outside the readable directories"
        reason = path_problem(target, allow_dir=True)
        if reason and reason != "does not exist":
            return f"is a folder whose entry {entry.name!r} {reason}"
    return None


def confine(value: str, roots: Sequence[Path], base: Path, *, folder_entries: bool = True) -> Path:
    """The resolved path of ``value`` when :func:`confinement_problem` finds nothing, else
    :class:`UnsafeInput`. Call it on every path an untrusted config makes a process read."""
    reason = confinement_problem(value, roots, base, folder_entries=folder_entries)
    if reason:
        raise UnsafeInput(f"{value!r} {reason}")
    return Path(os.path.realpath(base / value))


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300] or type(e).__name__
