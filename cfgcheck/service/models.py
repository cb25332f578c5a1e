"""Request and response models of the validator service (they make its OpenAPI document)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_OVERRIDES = 128
MAX_OVERRIDE_CHARS = 1000
CONFIG_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*$"
# Top-level keys that mark a body as a compose request rather than a composed run config
# (a run config never has them: unknown top-level keys are schema errors).
COMPOSE_KEYS = frozenset({"config_name", "overrides"})
# The key that marks a body as a native framework config (cfgcheck.sources).
NATIVE_KEY = "format"
MAX_NATIVE_CHARS = 1_000_000


class ComposeRequest(BaseModel):
    """Compose ``config_name`` from the server's config directory with Hydra overrides."""

    model_config = ConfigDict(extra="forbid", strict=True)

    config_name: str = Field(
        "config",
        max_length=200,
        pattern=CONFIG_NAME_PATTERN,
        description="Primary config in the server's config directory, e.g. 'config'.",
    )
    overrides: list[Annotated[str, Field(max_length=MAX_OVERRIDE_CHARS)]] = Field(
        default_factory=list,
        max_length=MAX_OVERRIDES,
        description="Hydra override strings, e.g. 'data.max_seq_length=2048', 'model=llama-3-8b'. "
        "Interpolations, sweeps and hydra.* keys are refused.",
    )


class NativeRequest(BaseModel):
    """Validate a native framework config (the text of a LitGPT, Axolotl, TRL or torchtune
    YAML file), as ``cfgcheck check --from FORMAT FILE OVERRIDE...`` does."""

    model_config = ConfigDict(extra="forbid", strict=True)

    format: Literal["litgpt", "axolotl", "trl", "llamafactory", "python", "torchtune", "launch"] = (
        Field(
            description="The file's framework; 'python' for a training script or notebook, "
            "'launch' for a shell script that launches a training entry point (both read "
            "statically, never run)."
        )
    )
    config: str = Field(
        max_length=MAX_NATIVE_CHARS,
        description="The config file's text (YAML or JSON), e.g. an Axolotl examples/*.yml; "
        "with format 'python', the script's text or the notebook's JSON.",
    )
    filename: str = Field(
        "config.yaml",
        max_length=200,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$",
        description="The name findings' locations show for the file.",
    )
    overrides: list[Annotated[str, Field(max_length=MAX_OVERRIDE_CHARS)]] = Field(
        default_factory=list,
        max_length=MAX_OVERRIDES,
        description="KEY=VALUE in the format's own keys, e.g. 'sequence_len=4096'.",
    )
    gpu: str | None = Field(
        None, max_length=40, description="The GPU the run is meant for (H100, or GiB)."
    )
    recipe: str | None = Field(
        None,
        max_length=100,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_/]*$",
        description="torchtune: the recipe `tune run` runs (default: the file's `tune run` "
        "comment), e.g. 'lora_finetune_single_device'.",
    )
    nproc_per_node: int | None = Field(
        None, ge=1, le=1024, description="torchtune: `tune run --nproc_per_node N`."
    )
    cwd: str | None = Field(
        None,
        max_length=1000,
        description="launch: the folder the script runs from, where its entry point and "
        "--deepspeed JSON are found; inside the service's roots (default: the first root).",
    )


class LocationOut(BaseModel):
    """Where a value was set: a config file and line, or ``<override ...>`` with no line."""

    file: str
    line: int | None = None
    cell: int | None = Field(None, description="A notebook's cell (0-based over all cells).")


class EditOut(BaseModel):
    """A fix written as code (a Python script or notebook): ``old`` becomes ``new``."""

    file: str
    line: int | None = None
    cell: int | None = None
    start: list[int]
    end: list[int]
    old: str
    new: str


class FixOut(BaseModel):
    """A machine-readable fix: overrides that, applied together, remove the finding."""

    overrides: list[str]
    summary: str
    edits: list[EditOut] | None = Field(
        None, description="For a Python script or notebook: the fix as code edits."
    )


class FindingOut(BaseModel):
    """One finding, as ``cfgcheck check --format json`` prints it (more keys may be added)."""

    rule: str = Field(description="Stable kebab-case rule id.")
    severity: Literal["error", "warning", "info"]
    paths: list[str] = Field(description="Dotted config paths involved.")
    message: str
    hint: str = Field(description="The concrete fix.")
    locations: list[LocationOut | None] | None = Field(
        None,
        description="One per path: where its value was set (compose requests), or null.",
    )
    fixes: list[FixOut] = Field(
        default_factory=list,
        description="Machine-readable fixes: each one's overrides, applied together, remove "
        "the finding and introduce no new error.",
    )
    doc: str | None = Field(
        None, description="Where the rule is explained: an anchor of docs/rules.md."
    )


class CheckResponse(BaseModel):
    """The verdict: exactly the JSON of ``cfgcheck check --format json``."""

    ok: bool = Field(description="True when there is no error finding (warnings allowed).")
    findings: list[FindingOut]


class ErrorResponse(BaseModel):
    """A refused request: one line saying why."""

    detail: str


class HealthResponse(BaseModel):
    """``GET /healthz`` and ``GET /readyz``: cheap, unauthenticated, for load balancers."""

    status: Literal["ok", "ready", "busy", "draining"]
    version: str
    pid: int = Field(description="The worker process that answered.")
