"""Dense peak throughput per accelerator, as a cited data table matched from the NVML name.

Datasheets headline the 2:4 structured-sparsity figure (marked "*" in NVIDIA's tables), which is
exactly twice the dense one. MFU divides by the *dense* peak, so every value below is the dense
one: the datasheet's starred figure divided by two. GeForce parts run BF16/FP16 with FP32
accumulation at half the FP16-accumulate rate; the FP32-accumulate figure (what training uses)
is stored. An unknown device, or a dtype the card has no rate for, gives no peak (None): never
another card's figure, never infinity.

``verified`` is True only for a row whose figures were read from NVIDIA's own document in this
project's research; rows marked False were checked against secondary sources (named in the
citation) but the primary datasheet could not be read. See docs/spec.md "Peaks".

Standard library only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

DTYPES = ("bf16", "fp16", "tf32", "fp8", "fp32")

_DTYPE_ALIASES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "tf32": "tf32",
    "tensorfloat32": "tf32",
    "fp8": "fp8",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
}

_TERA = 1e12
_GIGA = 1e9


@dataclass(frozen=True)
class DeviceRow:
    """One accelerator: how to recognise it and its dense peaks.

    Attributes:
        label: human name of the part ("H100 SXM").
        pattern: a regular expression that must match the *whole* NVML device name
            (``re.fullmatch``, case-insensitive, after collapsing runs of spaces).
        tflops: dense TFLOP/s per dtype in DTYPES; a dtype the card has no rate for is absent.
            "fp32" is the non-tensor (CUDA-core) rate; the others are tensor-core rates.
        mem_bw: peak memory bandwidth in bytes/s.
        tdp_w: board power (TDP / max power) in W, for planning energy.
        citation: the datasheet (URL and table) and, where it was not read, what was.
        verified: True when the figures were read from NVIDIA's own document.
    """

    label: str
    pattern: str
    tflops: Mapping[str, float] = field(hash=False)
    mem_bw: float
    tdp_w: float
    citation: str
    verified: bool

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak in FLOP/s for ``dtype`` (a name in DTYPES), or None if the card lacks it."""
        tflops = self.tflops.get(dtype)
        return None if tflops is None else tflops * _TERA

    def matches(self, name: str) -> bool:
        """Whether ``name`` (an NVML device name) is this part."""
        return re.fullmatch(self.pattern, _clean(name), flags=re.IGNORECASE) is not None


@dataclass(frozen=True)
class ResolvedPeak:
    """The peak an MFU figure divides by, with where it came from.

    Attributes:
        flops: dense peak of one device in FLOP/s.
        dtype: the dtype the peak is for (a name in DTYPES, or what the user declared).
        device: the row's label, or the device name as given for a declared peak.
        source: "table" (from this module's rows) or "declared" (typed in by the user).
        citation: the row's citation, or "declared by the user".
        verified: the row's ``verified``; None for a declared peak.
    """

    flops: float
    dtype: str
    device: str
    source: str
    citation: str
    verified: bool | None = None


def _row(label, pattern, *, gbps, tdp, cite, verified=False, **tflops) -> DeviceRow:
    """Build a row from datasheet units: TFLOP/s per dtype keyword, GB/s, W."""
    unknown = set(tflops) - set(DTYPES)
    if unknown:
        raise ValueError(f"unknown dtype keys {sorted(unknown)} in peak row {label!r}")
    rates = MappingProxyType({k: float(v) for k, v in tflops.items() if v is not None})
    return DeviceRow(label, pattern, rates, gbps * _GIGA, float(tdp), cite, verified)


_NOT_READ = "primary datasheet not readable from this project's research environment"

# Most specific first. Patterns are anchored (fullmatch), so "NVIDIA L40S" can never be taken
# for the L40 or the L4, "NVIDIA H200 NVL" for the H200 SXM, nor "NVIDIA GH200 480GB" for H200.
#
# Deliberately absent:
# - A10G (NVML "NVIDIA A10G"): an AWS-only part with no NVIDIA datasheet; other tools silently
#   reuse the A10's 125 TFLOP/s, but its clocks and power differ. Declare a peak for it.
# - GH200 (NVML "NVIDIA GH200 480GB" etc.): a Hopper GPU at a different power envelope than the
#   H100/H200 SXM rows; no figure was checked for it. Declare a peak for it.
# fmt: off
_ROWS: tuple[DeviceRow, ...] = (
    _row(
        "GB200 (per GPU)", r"NVIDIA GB200",
        bf16=2500, fp16=2500, tf32=1250, fp8=5000, gbps=8000, tdp=1200,
        cite="https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (spec table: FP16/BF16 "
        "360 PFLOPS*, TF32 180 PFLOPS*, FP8 720 PFLOPS*, HBM3e 576 TB/s for 72 GPUs; /72, /2 for "
        f"dense); {_NOT_READ}; cross-checked: glennklockwood.com/garden/processors/B200 (GB200 at "
        "1,200 W: BF16 2500, TF32 1250, FP8 5000 dense). TDP per GPU is that configuration's. "
        "Note: Megatron-LM gpu_peak_flops.py lists GB200 at 2250 (the B200 figure).",
    ),
    _row(
        "B200 (HGX)", r"NVIDIA B200",
        bf16=2250, fp16=2250, tf32=1100, fp8=4500, gbps=7700, tdp=1000,
        cite="https://nvdam.widen.net/s/wwnsxrhm2w/blackwell-datasheet-3384703 (HGX B200 column: "
        f"FP16/BF16 4.5 PFLOPS*, TF32 2.2 PFLOPS*, FP8 9 PFLOPS*); {_NOT_READ}; cross-checked: "
        "glennklockwood.com/garden/processors/B200, torchtitan tools/utils.py (2.25e15), "
        "Megatron-LM gpu_peak_flops.py (2250). Bandwidth 7.7 TB/s per GPU (HGX B200 62 TB/s / 8) "
        "unverified; DGX figures give 8 TB/s.",
    ),
    _row(
        "H200 NVL", r"NVIDIA H200 NVL",
        bf16=835.5, fp16=835.5, tf32=417.5, fp8=1670.5, fp32=60, gbps=4800, tdp=600,
        cite="https://www.nvidia.com/en-us/data-center/h200/ (spec table, H200 NVL column: "
        "BF16 1,671 TFLOPS*, TF32 835 TFLOPS*, FP8 3,341 TFLOPS*, FP32 60, 4.8 TB/s, "
        f"up to 600 W); {_NOT_READ}; cross-checked: nanochat common.py (836e12).",
    ),
    _row(
        "H200 SXM", r"NVIDIA H200",
        bf16=989.5, fp16=989.5, tf32=494.5, fp8=1979, fp32=67, gbps=4800, tdp=700,
        cite="https://www.nvidia.com/en-us/data-center/h200/ (spec table, H200 SXM column: "
        "BF16 1,979 TFLOPS*, TF32 989 TFLOPS*, FP8 3,958 TFLOPS*, FP32 67, 4.8 TB/s, "
        f"up to 700 W); {_NOT_READ}; cross-checked: torchtitan tools/utils.py (989e12), "
        "Megatron-LM gpu_peak_flops.py (989).",
    ),
    _row(
        "H100 NVL", r"NVIDIA H100 NVL",
        bf16=835.5, fp16=835.5, tf32=417.5, fp8=1670.5, fp32=60, gbps=3900, tdp=400,
        cite="https://www.nvidia.com/en-us/data-center/h100/ (spec table, H100 NVL column: "
        f"BF16 1,671 TFLOPS*, TF32 835 TFLOPS*, FP8 3,341 TFLOPS*, FP32 60, 3.9 TB/s, 350-400 W); "
        f"{_NOT_READ}; cross-checked: torchtitan tools/utils.py (835e12).",
    ),
    _row(
        "H100 PCIe", r"NVIDIA H100 PCIe",
        bf16=756.5, fp16=756.5, tf32=378, fp8=1513, fp32=51, gbps=2000, tdp=350,
        cite="https://www.nvidia.com/en-us/data-center/h100/ (H100 PCIe column: BF16 1,513 "
        f"TFLOPS*, TF32 756 TFLOPS*, FP8 3,026 TFLOPS*, FP32 51, 2 TB/s, 300-350 W); {_NOT_READ}; "
        "cross-checked: NVIDIA product brief PB-11133-001 (350 W, >2,000 GB/s) via a reproduction "
        "at manuals.plus, torchtitan tools/utils.py (756e12).",
    ),
    _row(
        "H100 SXM", r"NVIDIA H100 80GB HBM3",
        bf16=989.5, fp16=989.5, tf32=494.5, fp8=1979, fp32=67, gbps=3350, tdp=700,
        cite="https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM column: BF16 1,979 "
        f"TFLOPS*, TF32 989 TFLOPS*, FP8 3,958 TFLOPS*, FP32 67, 3.35 TB/s, up to 700 W); "
        f"{_NOT_READ}; cross-checked: glennklockwood.com/garden/processors/h100 (whitepaper "
        "989.4 dense), torchtitan tools/utils.py (989e12), Megatron-LM gpu_peak_flops.py (989).",
    ),
    _row(
        "A100 80GB PCIe", r"NVIDIA A100 80GB PCIe",
        bf16=312, fp16=312, tf32=156, fp32=19.5, gbps=1935, tdp=300,
        cite="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
        "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (specifications table, A100 80GB PCIe "
        f"column: BF16 312/624*, TF32 156/312*, FP32 19.5, 1,935 GB/s, 300 W); {_NOT_READ}; "
        "cross-checked: thundercompute.com A100 specs, glennklockwood.com/garden/processors/A100.",
    ),
    _row(
        "A100 40GB PCIe", r"NVIDIA A100-PCIE-40GB",
        bf16=312, fp16=312, tf32=156, fp32=19.5, gbps=1555, tdp=250,
        cite="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
        "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (A100 40GB PCIe: BF16 312/624*, "
        f"1,555 GB/s, 250 W); {_NOT_READ}; cross-checked: thundercompute.com A100 specs.",
    ),
    _row(
        "A100 80GB SXM", r"NVIDIA A100-SXM4-80GB",
        bf16=312, fp16=312, tf32=156, fp32=19.5, gbps=2039, tdp=400,
        cite="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
        "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (A100 80GB SXM column: BF16 312/624*, "
        f"TF32 156/312*, FP32 19.5, 2,039 GB/s, 400 W); {_NOT_READ}; cross-checked: "
        "glennklockwood.com/garden/processors/A100, thundercompute.com A100 specs.",
    ),
    _row(
        "A100 40GB SXM", r"NVIDIA A100-SXM4-40GB",
        bf16=312, fp16=312, tf32=156, fp32=19.5, gbps=1555, tdp=400,
        cite="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
        "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (A100 40GB SXM: BF16 312/624*, "
        f"TF32 156/312*, FP32 19.5, 1,555 GB/s, 400 W); {_NOT_READ}; cross-checked: "
        "glennklockwood.com/garden/processors/A100 (cites this datasheet).",
    ),
    _row(
        "L40S", r"NVIDIA L40S",
        bf16=362.05, fp16=362.05, tf32=183, fp8=733, fp32=91.6, gbps=864, tdp=350,
        cite="NVIDIA L40S datasheet, https://www.nvidia.com/en-us/data-center/l40s/ (spec table: "
        "BF16 362.05/733*, TF32 183/366*, FP8 733/1,466*, FP32 91.6, 864 GB/s, 350 W); "
        f"{_NOT_READ}; the L40/L40S table was read as reproduced by a reseller (mullet.se).",
    ),
    _row(
        "L40", r"NVIDIA L40",
        bf16=181.05, fp16=181.05, tf32=90.5, fp8=362, fp32=90.5, gbps=864, tdp=300,
        cite="NVIDIA L40 datasheet, https://www.nvidia.com/en-us/data-center/l40/ (spec table: "
        "BF16 181.05/362.1*, TF32 90.5/181*, FP8 362/724*, FP32 90.5, 864 GB/s, 300 W); "
        f"{_NOT_READ}; the L40/L40S table was read as reproduced by a reseller (mullet.se).",
    ),
    _row(
        "L4", r"NVIDIA L4",
        bf16=121, fp16=121, tf32=60, fp8=242.5, fp32=30.3, gbps=300, tdp=72,
        cite="NVIDIA L4 datasheet, https://www.nvidia.com/en-us/data-center/l4/ (spec table: "
        "BF16 242*, TF32 120*, FP8 485*, FP32 30.3, 300 GB/s, 72 W; dense = half); "
        f"{_NOT_READ}; cross-checked: grokipedia L4 vs L40S summary, sourcecode.com listing.",
    ),
    _row(
        "A10", r"NVIDIA A10",
        bf16=125, fp16=125, tf32=62.5, fp32=31.2, gbps=600, tdp=150,
        cite="NVIDIA A10 datasheet, https://www.nvidia.com/en-us/data-center/products/a10-gpu/ "
        "(spec table: BF16 125/250*, TF32 62.5/125*, FP32 31.2, 600 GB/s, 150 W); "
        f"{_NOT_READ}; cross-checked: sysrqmts.com A10 (600.2 GB/s, FP32 31.24).",
    ),
    _row(
        "GeForce RTX 4090", r"NVIDIA GeForce RTX 4090",
        bf16=165.2, fp16=165.2, tf32=82.6, fp8=330.3, fp32=82.6, gbps=1008, tdp=450,
        cite="NVIDIA Ada GPU architecture whitepaper, https://images.nvidia.com/aem-dam/Solutions/"
        "geforce/ada/nvidia-ada-gpu-architecture.pdf (appendix table, RTX 4090 column: FP16/BF16 "
        "tensor with FP32 accumulate 165.2, TF32 82.6, FP8 with FP32 accumulate 330.3, FP32 82.6, "
        f"1,008 GB/s, 450 W); {_NOT_READ}; cross-checked: nanochat common.py (165.2e12).",
    ),
    _row(
        "RTX A6000", r"NVIDIA RTX A6000",
        bf16=154.85, fp16=154.85, fp32=38.7, gbps=768, tdp=300,
        cite="NVIDIA RTX A6000 datasheet, https://www.nvidia.com/en-us/design-visualization/"
        "rtx-a6000/ (tensor performance 309.7 TFLOPS*, FP32 38.7, 768 GB/s, 300 W; dense = half); "
        f"{_NOT_READ}; BF16 with FP32 accumulate taken equal to FP16 as the A40 datasheet (same "
        "GA102 pro line) prints 149.7 for both. No TF32 figure was found: none stored.",
    ),
    _row(
        "T4", r"(?:NVIDIA |Tesla )?T4",
        fp16=65, fp32=8.1, gbps=320, tdp=70,
        cite="NVIDIA T4 datasheet, https://www.nvidia.com/en-us/data-center/tesla-t4/ (mixed "
        "precision FP16/FP32 65 TFLOPS, FP32 8.1, 320 GB/s, 70 W; no BF16, TF32 or FP8); "
        f"{_NOT_READ}; cross-checked: sysrqmts.com T4 (65.13 FP16, 320 GB/s).",
    ),
    _row(
        "V100 SXM2", r"(?:NVIDIA |Tesla )?V100-SXM2-(?:16|32)GB",
        fp16=125, fp32=15.7, gbps=900, tdp=300,
        cite="NVIDIA V100 datasheet, https://www.nvidia.com/en-us/data-center/v100/ (V100 SXM2: "
        "tensor performance 125 TFLOPS, FP32 15.7, 900 GB/s, 300 W; no BF16, TF32 or FP8); "
        f"{_NOT_READ}; cross-checked: hmc-tech.com V100 SXM (125.34 FP16 tensor).",
    ),
    _row(
        "V100 PCIe", r"(?:NVIDIA |Tesla )?V100-PCIE-(?:16|32)GB",
        fp16=112, fp32=14, gbps=900, tdp=250,
        cite="NVIDIA V100 datasheet, https://www.nvidia.com/en-us/data-center/v100/ (V100 PCIe: "
        f"tensor performance 112 TFLOPS, FP32 14, 900 GB/s, 250 W); {_NOT_READ}.",
    ),
)
# fmt: on


def rows() -> tuple[DeviceRow, ...]:
    """Every row of the peak table, most specific first (for ``tm peaks`` and ``tm doctor``)."""
    return _ROWS


def _clean(name: str) -> str:
    return " ".join(name.split())


def normalize_dtype(name: str | None) -> str | None:
    """A dtype name in DTYPES for ``name`` ("bfloat16", "torch.bfloat16", "BF16" -> "bf16").

    Returns None for None or a name that is not a known alias (int8, float64, ...).
    """
    if not isinstance(name, str):
        return None
    key = name.strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(key)


def match_device(name: str | None) -> DeviceRow | None:
    """The table row for an NVML device name, or None.

    Input: the name as ``nvmlDeviceGetName`` returns it ("NVIDIA H100 80GB HBM3").
    Rule: the first row (most specific first) whose anchored pattern matches the whole name,
    case-insensitively, after collapsing runs of whitespace. No substring matching: look-alikes
    ("NVIDIA L40S" vs L40 vs L4, "NVIDIA H200 NVL" vs H200, "NVIDIA GH200 480GB", "NVIDIA A10G")
    resolve to their own row or to None.
    Raises: nothing; None, "", "cpu" or any unknown name gives None.
    """
    if not isinstance(name, str) or not name.strip():
        return None
    for row in _ROWS:
        if row.matches(name):
            return row
    return None


def resolve_peak(
    device: str | None, dtype: str | None, declared_flops: float | None = None
) -> ResolvedPeak | None:
    """The dense peak (FLOP/s, one device) that MFU divides by, or None for "no MFU".

    Inputs: ``device``, an NVML name ("cpu" or None when there is no accelerator); ``dtype``, the
    run's compute dtype (a DTYPES name or an alias such as "torch.bfloat16"); ``declared_flops``,
    a peak in FLOP/s typed by the user (``--peak``).
    Rule: a declared peak always wins and is labelled ``source="declared"``; otherwise the table
    row matched by ``match_device`` gives its dense rate for the dtype (``source="table"``).
    Returns None for an unknown device, a missing or unknown dtype, or a dtype the card has no
    rate for (FP8 on an A100, BF16 on a T4): never another card's value, never infinity.
    Raises: ValueError when ``declared_flops`` is not a finite number > 0.
    Source: the table rows (each cited); docs/spec.md "Peaks".
    """
    if declared_flops is not None:
        return _declared(device, dtype, declared_flops)
    name = normalize_dtype(dtype)
    row = match_device(device)
    if name is None or row is None:
        return None
    flops = row.peak_flops(name)
    if flops is None:
        return None
    return ResolvedPeak(flops, name, row.label, "table", row.citation, row.verified)


def _declared(device: str | None, dtype: str | None, declared_flops: float) -> ResolvedPeak:
    ok = isinstance(declared_flops, (int, float)) and not isinstance(declared_flops, bool)
    if not ok or not math.isfinite(declared_flops) or declared_flops <= 0:
        raise ValueError(f"a declared peak must be a finite FLOP/s > 0, got {declared_flops!r}")
    label = normalize_dtype(dtype) or (dtype if isinstance(dtype, str) and dtype else "unspecified")
    return ResolvedPeak(
        float(declared_flops), label, device or "unknown", "declared", "declared by the user"
    )


__all__ = [
    "DTYPES",
    "DeviceRow",
    "ResolvedPeak",
    "match_device",
    "normalize_dtype",
    "resolve_peak",
    "rows",
]
