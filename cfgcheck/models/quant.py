"""A pre-quantized checkpoint's ``quantization_config`` (config.json) as the stored weight
format, ``model.weight_format``.

The methods and their keys are those of transformers' quantization configs
(``transformers/utils/quantization_config.py``): ``GPTQConfig`` (``bits``, ``group_size``),
``AwqConfig`` (``bits``, ``group_size``), ``BitsAndBytesConfig`` (``load_in_4bit`` /
``load_in_8bit``, ``bnb_4bit_quant_type``, ``bnb_4bit_use_double_quant``), ``Mxfp4Config``
(gpt-oss: experts in MXFP4), ``FineGrainedFP8Config`` (``fp8``, ``weight_block_size``) and
``FbgemmFp8Config``. A method cfgcheck does not know (compressed-tensors, hqq, ...) leaves the
format unset, so the estimate counts 16-bit weights (on the safe side).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from cfgcheck.models.files import ModelFolderError
from cfgcheck.schema.model import WeightFormat

FORMATS: tuple[str, ...] = get_args(WeightFormat)  # the schema's model.weight_format


def weight_format(data: Mapping[str, Any], where: str) -> str | None:
    """The stored format of ``data["quantization_config"]`` (None: not quantized, or a method
    cfgcheck does not model)."""
    q = data.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, Mapping):
        raise ModelFolderError(f"{where}: quantization_config must be an object")
    method = str(q.get("quant_method", "")).lower()
    if method in ("gptq", "awq"):
        bits = q.get("bits", 4)
        name = f"{method}-{bits}bit"
        if name not in FORMATS:
            raise ModelFolderError(f"{where}: quantization_config {method} with bits={bits!r}")
        return name
    if method == "bitsandbytes":
        if q.get("load_in_8bit"):
            return "bnb-int8"
        kind = str(q.get("bnb_4bit_quant_type", "fp4"))
        dq = "-dq" if q.get("bnb_4bit_use_double_quant") and kind == "nf4" else ""
        return f"bnb-{kind}{dq}" if kind in ("nf4", "fp4") else None
    if method == "mxfp4":
        return "mxfp4"
    if method == "fp8":
        return "fp8"
    if method == "fbgemm_fp8":
        return "fbgemm-fp8"
    return None


def group_size(data: Mapping[str, Any]) -> int:
    """GPTQ / AWQ's group of input features sharing a scale and a zero (default 128)."""
    q = data.get("quantization_config")
    g = q.get("group_size", 128) if isinstance(q, Mapping) else 128
    return g if isinstance(g, int) and g > 0 else 128
