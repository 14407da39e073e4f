"""Dense peak throughput per accelerator, as a cited data table, and the names it is found by.

Datasheets headline the 2:4 structured-sparsity figure (marked "*" in NVIDIA's tables, "with
structured sparsity" in AMD's), which is exactly twice the dense one. MFU divides by the *dense*
peak, so every value below is the dense one: the datasheet's sparse figure divided by two, or the
dense figure where the document prints one. GeForce parts run BF16/FP16 with FP32 accumulation
at half the FP16-accumulate rate; the FP32-accumulate figure (what training uses) is stored,
never the non-tensor vector rate. An unknown device, or a dtype the card has no rate for, gives
no peak (None): never another card's figure, never infinity.

``verified`` is True only for a row whose every stored figure was read in the vendor's own text
in this project's research (the citation names it); rows marked False were checked against
secondary sources named in the citation, which says why the primary document could not be read.
See docs/spec.md "Peaks".

Device names: NVIDIA rows list the product names the driver reports (``nvmlDeviceGetName``), as
in the "Compatible GPUs" table of NVIDIA's open-gpu-kernel-modules README (read in a copy of that
table; Volta and the B300 are not in it, their names come from nvidia-smi output in public logs).
AMD Instinct rows list the name torch reports on ROCm (``torch.cuda.get_device_name``); NVML
never sees an AMD GPU, so those rows serve a declared ``--device`` and ``tm plan --gpu``. A name
as a person types it (``--device``, ``tm plan --gpu``, ``tm peaks NAME``) is resolved by
``find_gpu``: one set of rules, below the table.

Standard library only.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from trainmeter.core.units import quoted

DTYPES = ("bf16", "fp16", "tf32", "fp8", "fp32")

KINDS = ("datacenter", "workstation", "geforce")

VENDORS = ("nvidia", "amd")

# What a vendor's device names start with (checked when a row is built), and the slugged words a
# typed name may start with ("NVIDIA H100 SXM", "AMD Instinct MI300X"): stripped only to look
# among that vendor's rows, so no NVIDIA name can reach an AMD row, nor the reverse.
_NAME_PREFIX = MappingProxyType({"nvidia": ("NVIDIA ", "Tesla "), "amd": ("AMD ",)})
_VENDOR_WORDS = MappingProxyType(
    {"nvidia": ("nvidia-", "tesla-"), "amd": ("amd-instinct-", "amd-", "instinct-")}
)
# Where a vendor's device names come from, as ``tm peaks`` says it.
NAME_SOURCE = MappingProxyType({"nvidia": "NVML", "amd": "ROCm"})

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
            (``re.fullmatch``, case-insensitive, after collapsing runs of spaces). Built from
            ``names``: each name is an escaped literal, so no row matches a look-alike.
        tflops: dense TFLOP/s per dtype in DTYPES; a dtype the card has no rate for, or for
            which no figure was found, is absent. "fp32" is the non-tensor (CUDA-core) rate;
            the others are tensor-core rates (GeForce: with FP32 accumulation).
        mem_bw: peak memory bandwidth in bytes/s.
        tdp_w: board power (TDP / max power) in W, for planning energy.
        citation: the datasheet (title, URL and table) and, where it was not read, what was.
        verified: True when every figure of the row was read in the vendor's own document text.
        names: the device names this row stands for: NVML names (what ``nvidia-smi`` prints)
            for NVIDIA, the name torch reports on ROCm for AMD.
        kind: "datacenter", "workstation" or "geforce" (a name in KINDS).
        vendor: "nvidia" or "amd" (a name in VENDORS).
    """

    label: str
    pattern: str
    tflops: Mapping[str, float] = field(hash=False)
    mem_bw: float
    tdp_w: float
    citation: str
    verified: bool
    names: tuple[str, ...] = ()
    kind: str = "datacenter"
    vendor: str = "nvidia"

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak in FLOP/s for ``dtype`` (a name in DTYPES), or None if the card lacks it."""
        tflops = self.tflops.get(dtype)
        return None if tflops is None else tflops * _TERA

    def matches(self, name: str) -> bool:
        """Whether ``name`` (a device name as the driver reports it) is this part."""
        return re.fullmatch(self.pattern, _clean(name), flags=re.IGNORECASE) is not None

    def as_dict(self) -> dict[str, Any]:
        """The row as plain data for a printer (``tm peaks``) or JSON.

        Keys: label, kind, vendor, names (list), pattern, tflops ({dtype: dense TFLOP/s or None}
        for every dtype in DTYPES, in that order), mem_bw (bytes/s), tdp_w (W), verified,
        citation.
        """
        return {
            "label": self.label,
            "kind": self.kind,
            "vendor": self.vendor,
            "names": list(self.names),
            "pattern": self.pattern,
            "tflops": {d: self.tflops.get(d) for d in DTYPES},
            "mem_bw": self.mem_bw,
            "tdp_w": self.tdp_w,
            "verified": self.verified,
            "citation": self.citation,
        }


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


def _row(
    label, names, *, kind, gbps, tdp, cite, verified=False, vendor="nvidia", **tflops
) -> DeviceRow:
    """Build a row from datasheet units: TFLOP/s per dtype keyword, GB/s, W.

    Raises ValueError for an unknown dtype, kind or vendor, or a device name that does not start
    with its vendor's word ("NVIDIA ", "Tesla ", "AMD "): that keeps the vendors apart.
    """
    unknown = set(tflops) - set(DTYPES)
    if unknown:
        raise ValueError(f"unknown dtype keys {sorted(unknown)} in peak row {label!r}")
    if kind not in KINDS or vendor not in VENDORS:
        raise ValueError(f"unknown kind {kind!r} or vendor {vendor!r} in peak row {label!r}")
    names = tuple(names)
    if not names or not all(n.startswith(_NAME_PREFIX[vendor]) for n in names):
        raise ValueError(f"peak row {label!r}: names must start with {_NAME_PREFIX[vendor]}")
    pattern = "|".join(re.escape(n) for n in names)
    rates = MappingProxyType({k: float(v) for k, v in tflops.items() if v is not None})
    return DeviceRow(
        label, pattern, rates, gbps * _GIGA, float(tdp), cite, verified, names, kind, vendor
    )


def _tesla(*names: str) -> tuple[str, ...]:
    """Volta/Turing names: drivers print "Tesla ..."; accept an "NVIDIA ..." form too."""
    return tuple(f"{prefix} {n}" for n in names for prefix in ("Tesla", "NVIDIA"))


_NOT_READ = "primary datasheet not readable from this project's research environment"
_EXEMPLAR = (
    "NVIDIA Exemplar Performance README, https://github.com/NVIDIA/exemplar-performance "
    '(section "Peak Theoretical Throughput", non-sparse TFLOPS NVIDIA uses for MFU, and the '
    "reference-architecture sections)"
)
_ADA_WP = (
    "NVIDIA Ada GPU Architecture whitepaper, https://images.nvidia.com/aem-dam/Solutions/"
    "geforce/ada/nvidia-ada-gpu-architecture.pdf"
)
_GA102_WP = (
    "NVIDIA Ampere GA102 GPU Architecture whitepaper, https://www.nvidia.com/content/PDF/"
    "nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
)
_RTX_BW_WP = (
    "NVIDIA RTX Blackwell GPU Architecture whitepaper, https://images.nvidia.com/aem-dam/"
    "Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf"
)
_A100_DS = (
    "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/Solutions/"
    "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (specifications "
    "table, page 2"
)
_H100 = "NVIDIA H100 Tensor Core GPU datasheet / https://www.nvidia.com/en-us/data-center/h100/"
_BLACKWELL_DS = (
    "NVIDIA Blackwell datasheet, https://nvdam.widen.net/s/wwnsxrhm2w/blackwell-datasheet-3384703"
)


def _amd_page(model: str, series: str) -> str:
    """The title and URL of AMD's product page for one Instinct GPU ("MI300X", "mi300")."""
    return (f"AMD Instinct {model} product page, https://www.amd.com/en/products/accelerators/"
            f"instinct/{series}/{model.lower()}.html")  # fmt: skip


_ROCM_MI300 = (
    '"AMD Instinct MI300 series microarchitecture", https://github.com/ROCm/ROCm/blob/'
    "e396b4898f459db094bfd60b876f419f77eb9f09/docs/conceptual/gpu-arch/mi300.md"
)
_ROCM_SPECS = (
    '"Accelerator and GPU hardware specifications", https://github.com/ROCm/ROCm/blob/'
    "e396b4898f459db094bfd60b876f419f77eb9f09/docs/reference/gpu-arch-specs.rst"
)
_CDNA4 = (
    "CDNA4 arithmetic: 256 CUs (AMD's ROCm GPU specifications, https://rocm.docs.amd.com/en/"
    "latest/reference/gpu-specs.html, read) x 4096 BF16 or 8192 FP8 FLOP per clock per CU "
    "(twice CDNA3's 2048 and 4096 in AMD's MI300X table; AMD at ISSCC 2026 as reported by "
    "world-today-news.com: FP8 4,096 -> 8,192 per CU per clock); no TF32 matrix rate on CDNA4 "
    "(AMD's ROCm Compute Profiler docs: TF32 GEMM unsupported)"
)

# Grouped by kind (datacenter, workstation, GeForce), newest first; AMD Instinct rows close the
# datacenter group. Patterns are anchored
# (fullmatch) literals, so the order never decides a match: "NVIDIA L40S" can never be taken for
# the L40 or the L4, "NVIDIA H200 NVL" for the H200 SXM, "NVIDIA GH200 480GB" for an H200, a MIG
# slice ("... MIG 1g.5gb") for the whole GPU, nor "NVIDIA GeForce RTX 4090 D" for the 4090.
#
# Deliberately absent (no MFU unless a peak is declared):
# - A10G (NVML "NVIDIA A10G"): an AWS-only part with no NVIDIA datasheet; other tools silently
#   reuse the A10's 125 TFLOP/s, but its clocks and power differ. Likewise "NVIDIA A10M".
# - "NVIDIA H100" (PCI id 2339, no form factor in the name): cannot choose SXM, PCIe or NVL.
# - H20, H20-3e, L20, L2, H800 NVL: China-market parts whose NVIDIA spec sheets could not be
#   read; secondary sources disagree on which of their figures are sparse.
# - RTX PRO 6000 Blackwell Max-Q and Server editions, RTX 6000D, RTX 4090 D, RTX 5090 D, every
#   "SUPER" and "Laptop GPU": other clocks or power limits than the rows below.
# fmt: off
_ROWS: tuple[DeviceRow, ...] = (
    # ---------------------------------------------------------------- datacenter: Blackwell
    _row(
        "GB300 (per GPU)", ["NVIDIA GB300"], kind="datacenter",
        bf16=2500, fp16=2500, fp8=5000, gbps=8000, tdp=1400,
        cite="NVIDIA GB300 NVL72, https://www.nvidia.com/en-us/data-center/gb300-nvl72/ (spec "
        f"table for 72 GPUs); {_NOT_READ}. Read in {_EXEMPLAR}: GB300 and GB200 share the same "
        "BF16 and FP8 peaks (2,450 / 4,900 there, its MFU denominator), 8 TB/s per GPU, TDP "
        "configurable up to 1,400 W. BF16/FP16/FP8 are therefore the GB200 row's datasheet-"
        "derived 2,500 / 5,000 (2% above that README). TF32 and FP32 not stored: none read.",
    ),
    _row(
        "GB200 (per GPU)", ["NVIDIA GB200"], kind="datacenter",
        bf16=2500, fp16=2500, tf32=1250, fp8=5000, gbps=8000, tdp=1200,
        cite="NVIDIA GB200 NVL72, https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (spec "
        "table: FP16/BF16 360 PFLOPS*, TF32 180 PFLOPS*, FP8 720 PFLOPS*, HBM3e 576 TB/s for 72 "
        f"GPUs; per-GPU column 5 PFLOPS* BF16, up to 1,200 W; /72, /2 for dense); {_NOT_READ}; "
        "the per-GPU table was read as reproduced at zdszero.github.io (Hardware notes); "
        "cross-checked: glennklockwood.com/garden/processors/B200 (GB200 at 1,200 W: BF16 2500 "
        f"dense). Read in {_EXEMPLAR}: 8 TB/s per GPU, and an MFU denominator of 2,450 BF16 / "
        "4,900 FP8, 2% below the datasheet-derived figure. Megatron-LM gpu_peak_flops.py lists "
        "GB200 at 2250 (the HGX B200 figure).",
    ),
    _row(
        "B300 (HGX/DGX)", ["NVIDIA B300 SXM6 AC"], kind="datacenter",
        bf16=2250, fp8=4500, gbps=7700, tdp=1100, verified=True,
        cite=f"Read in {_EXEMPLAR}: B300 BF16 2,250 and FP8 4,500 TFLOPS non-sparse; DGX B300 "
        "reference system: TDP 1100 W, memory bandwidth 7.7 TB/s per GPU. Consistent with the "
        "HGX B300 datasheet (https://www.nvidia.com/en-us/data-center/hgx/: FP16/BF16 36 "
        "PFLOPS* for 8 GPUs), not read. FP16, TF32 and FP32 not stored: that text gives none.",
    ),
    _row(
        "B200 (HGX)", ["NVIDIA B200"], kind="datacenter",
        bf16=2250, fp16=2250, tf32=1100, fp8=4500, gbps=7700, tdp=1000,
        cite=f"{_BLACKWELL_DS} (HGX B200 column: FP16/BF16 4.5 PFLOPS*, TF32 2.2 PFLOPS*, FP8 9 "
        f"PFLOPS*, 180 GB HBM3e 7.7 TB/s, up to 1,000 W; /2 for dense); {_NOT_READ}; the "
        f"per-GPU table was read as reproduced at zdszero.github.io. Read in {_EXEMPLAR}: BF16 "
        "2,250 and FP8 4,500 TFLOPS non-sparse, DGX B200 TDP 1000 W and 7.7 TB/s per GPU; FP16 "
        "and TF32 were not in that text. Cross-checked: torchtitan tools/utils.py (2.25e15).",
    ),
    _row(
        "B100 (HGX)", ["NVIDIA B100"], kind="datacenter",
        bf16=1750, fp16=1750, tf32=900, fp8=3500, gbps=8000, tdp=700,
        cite=f"{_BLACKWELL_DS} (HGX B100 column: FP16/BF16 3.5 PFLOPS*, TF32 1.8 PFLOPS*, FP8 7 "
        f"PFLOPS*, 8 TB/s, 700 W; /2 for dense); {_NOT_READ}; cross-checked: stas00/"
        "ml-engineering accelerator table (B100 BF16 1750 dense), glennklockwood.com (B100 a "
        "700 W drop-in for HGX H100). NVML name assumed from the B200's; no B100 log was found.",
    ),
    # ---------------------------------------------------------------- datacenter: Hopper
    _row(
        "H200 NVL", ["NVIDIA H200 NVL"], kind="datacenter",
        bf16=835.5, fp16=835.5, tf32=417.5, fp8=1670.5, fp32=60, gbps=4800, tdp=600,
        cite="NVIDIA H200 Tensor Core GPU, https://www.nvidia.com/en-us/data-center/h200/ (spec "
        "table, H200 NVL column: BF16 1,671 TFLOPS*, TF32 835 TFLOPS*, FP8 3,341 TFLOPS*, FP32 "
        f"60, 4.8 TB/s, up to 600 W; /2 for dense); {_NOT_READ}; cross-checked: nanochat "
        "common.py (836e12).",
    ),
    _row(
        "H200 SXM", ["NVIDIA H200"], kind="datacenter",
        bf16=989.5, fp16=989.5, tf32=494.5, fp8=1979, fp32=67, gbps=4800, tdp=700,
        cite="NVIDIA H200 Tensor Core GPU, https://www.nvidia.com/en-us/data-center/h200/ (spec "
        "table, H200 SXM column: BF16 1,979 TFLOPS*, TF32 989 TFLOPS*, FP8 3,958 TFLOPS*, FP32 "
        f"67, 4.8 TB/s, up to 700 W; /2 for dense); {_NOT_READ}; cross-checked: torchtitan "
        "tools/utils.py (989e12), Megatron-LM gpu_peak_flops.py (989).",
    ),
    _row(
        "GH200 (96 GB HBM3)", ["NVIDIA GH200 480GB", "NVIDIA GH200 120GB"], kind="datacenter",
        bf16=989.5, fp16=989.5, tf32=494.5, fp8=1979, fp32=67, gbps=4000, tdp=1000,
        cite="NVIDIA GH200 Grace Hopper Superchip datasheet, https://www.nvidia.com/en-us/"
        "data-center/grace-hopper-superchip/ (96 GB HBM3 at 4 TB/s; superchip power "
        f"configurable 450-1000 W, Grace CPU and LPDDR5X included); {_NOT_READ}. The GPU is the "
        "H100 SXM's GH100 with 132 SMs (as torch reports for GH200 in public logs), so the "
        "tensor rates are the H100 SXM row's (1,979* BF16 / 2). The 120GB/480GB in the NVML "
        "name is the Grace LPDDR5X, not GPU memory. Not an H200.",
    ),
    _row(
        "GH200 (144 GB HBM3e)", ["NVIDIA GH200 144G HBM3e"], kind="datacenter",
        bf16=989.5, fp16=989.5, tf32=494.5, fp8=1979, fp32=67, gbps=4900, tdp=1000,
        cite="NVIDIA GH200 Grace Hopper Superchip datasheet, https://www.nvidia.com/en-us/"
        "data-center/grace-hopper-superchip/ (144 GB HBM3e at 4.9 TB/s; superchip power "
        f"configurable 450-1000 W); {_NOT_READ}. Same 132-SM GPU as the H100 SXM (torch reports "
        "132 SMs for this name in public logs), so the H100 SXM row's tensor rates. Not an "
        "H200: the H200 SXM has 141 GB and its own row.",
    ),
    _row(
        "H100 NVL", ["NVIDIA H100 NVL"], kind="datacenter",
        bf16=835.5, fp16=835.5, tf32=417.5, fp8=1670.5, fp32=60, gbps=3900, tdp=400,
        cite=f"{_H100} (spec table, H100 NVL column: BF16 1,671 TFLOPS*, TF32 835 TFLOPS*, FP8 "
        f"3,341 TFLOPS*, FP32 60, 3.9 TB/s, 350-400 W; /2 for dense); {_NOT_READ}; "
        "cross-checked: torchtitan tools/utils.py (835e12).",
    ),
    _row(
        "H100 PCIe", ["NVIDIA H100 PCIe"], kind="datacenter",
        bf16=756.5, fp16=756.5, tf32=378, fp8=1513, fp32=51, gbps=2000, tdp=350,
        cite=f"{_H100} (spec table, H100 PCIe column: BF16 1,513 TFLOPS*, TF32 756 TFLOPS*, FP8 "
        f"3,026 TFLOPS*, FP32 51, 2 TB/s, 300-350 W; /2 for dense); {_NOT_READ}; "
        "cross-checked: NVIDIA product brief PB-11133-001 (350 W, >2,000 GB/s) via a "
        "reproduction at manuals.plus, Lightning throughput.py _CUDA_FLOPS (1.513e15 / 2).",
    ),
    _row(
        "H100 SXM", ["NVIDIA H100 80GB HBM3"], kind="datacenter",
        bf16=989.5, fp16=989.5, tf32=494.5, fp8=1979, fp32=67, gbps=3350, tdp=700,
        cite=f"{_H100} (spec table, H100 SXM column: BF16 1,979 TFLOPS*, TF32 989 TFLOPS*, FP8 "
        f"3,958 TFLOPS*, FP32 67, 3.35 TB/s, up to 700 W; /2 for dense); {_NOT_READ}. Read in "
        f"{_EXEMPLAR}: H100 FP8 1,979 and BF16 989 non-sparse (989.5 truncated), DGX H100 "
        "700 W. Cross-checked: glennklockwood.com/garden/processors/h100 (whitepaper 989.4 "
        "dense), torchtitan tools/utils.py (989e12).",
    ),
    _row(
        "H800 SXM", ["NVIDIA H800"], kind="datacenter",
        bf16=989.5, fp16=989.5, tf32=494.5, fp8=1979, fp32=67, gbps=3350, tdp=700,
        cite="NVIDIA H800 Tensor Core GPU datasheet (China market; no public copy found); "
        f"{_NOT_READ}. The H800 is the H100 SXM with FP64 and NVLink cut and its tensor rates "
        "unchanged, so the H100 SXM row's figures (1,979* BF16 / 2); cross-checked: "
        "citsjtu2020/LLM-Prof hardware_spec.md (NVIDIA_H800 989e12 dense, 3,350 GB/s). NVML "
        'name "NVIDIA H800" is PCI id 2324, the SXM board, in NVIDIA\'s driver README.',
    ),
    _row(
        "H800 PCIe", ["NVIDIA H800 PCIe"], kind="datacenter",
        bf16=756.5, fp16=756.5, tf32=378, fp8=1513, fp32=51, gbps=2000, tdp=350,
        cite="NVIDIA H800 PCIe datasheet (China market; no public copy found); "
        f"{_NOT_READ}. The H800 PCIe is the H100 PCIe with FP64 and NVLink cut and its tensor "
        "rates unchanged, so the H100 PCIe row's figures (1,513* BF16 / 2).",
    ),
    # ---------------------------------------------------------------- datacenter: Ada
    _row(
        "L40S", ["NVIDIA L40S"], kind="datacenter",
        bf16=362.05, fp16=362.05, tf32=183, fp8=733, fp32=91.6, gbps=864, tdp=350,
        cite="NVIDIA L40S datasheet, https://www.nvidia.com/en-us/data-center/l40s/ (spec table: "
        "BF16 362.05 | 733*, TF32 183 | 366*, FP8 733 | 1,466*, FP32 91.6, 864 GB/s, 350 W; the "
        f"printed dense figures are stored); {_NOT_READ}; the L40/L40S table was read as "
        "reproduced by a reseller (mullet.se); cross-checked: stas00/ml-engineering (362 / "
        "733).",
    ),
    _row(
        "L40", ["NVIDIA L40"], kind="datacenter",
        bf16=181.05, fp16=181.05, tf32=90.5, fp8=362, fp32=90.5, gbps=864, tdp=300,
        cite="NVIDIA L40 datasheet, https://www.nvidia.com/en-us/data-center/l40/ (spec table: "
        "BF16 181.05 | 362.1*, TF32 90.5 | 181*, FP8 362 | 724*, FP32 90.5, 864 GB/s, 300 W); "
        f"{_NOT_READ}; the L40/L40S table was read as reproduced by a reseller (mullet.se).",
    ),
    _row(
        "L4", ["NVIDIA L4"], kind="datacenter",
        bf16=121, fp16=121, tf32=60, fp8=242.5, fp32=30.3, gbps=300, tdp=72,
        cite="NVIDIA L4 datasheet, https://www.nvidia.com/en-us/data-center/l4/ (spec table: "
        "BF16 242 TFLOPS*, TF32 120*, FP8 485*, FP32 30.3, 300 GB/s, 72 W; /2 for dense); "
        f"{_NOT_READ}; cross-checked: grokipedia L4 vs L40S summary (242 and 485 with "
        "sparsity), store.sourcecode.com listing (TF32 120 with sparsity).",
    ),
    # ---------------------------------------------------------------- datacenter: Ampere
    _row(
        "A100 80GB SXM", ["NVIDIA A100-SXM4-80GB"], kind="datacenter",
        bf16=312, fp16=312, tf32=156, fp32=19.5, gbps=2039, tdp=400,
        cite=f"{_A100_DS}, A100 80GB SXM column: BF16 312 | 624*, TF32 156 | 312*, FP32 19.5, "
        f"2,039 GB/s, 400 W; no FP8); {_NOT_READ}; cross-checked: glennklockwood.com/garden/"
        "processors/A100, thundercompute.com A100 specs, NVIDIA's Ampere-architecture blog "
        "Table 1 as reproduced in public repositories (Peak BF16 Tensor 312/624).",
    ),
    _row(
        "A100 40GB SXM", ["NVIDIA A100-SXM4-40GB"], kind="datacenter",
        bf16=312, fp16=312, tf32=156, fp32=19.5, gbps=1555, tdp=400,
        cite=f"{_A100_DS}, A100 40GB SXM: BF16 312 | 624*, TF32 156 | 312*, FP32 19.5, 1,555 "
        f"GB/s, 400 W; no FP8); {_NOT_READ}; cross-checked: glennklockwood.com/garden/"
        "processors/A100 (cites this datasheet), NVIDIA A100 whitepaper Table as reproduced "
        "in public repositories (1555 GB/sec).",
    ),
    _row(
        "A100 80GB PCIe", ["NVIDIA A100 80GB PCIe"], kind="datacenter",
        bf16=312, fp16=312, tf32=156, fp32=19.5, gbps=1935, tdp=300,
        cite=f"{_A100_DS}, A100 80GB PCIe column: BF16 312 | 624*, TF32 156 | 312*, FP32 19.5, "
        f"1,935 GB/s, 300 W; no FP8); {_NOT_READ}; cross-checked: thundercompute.com A100 "
        "specs, glennklockwood.com/garden/processors/A100.",
    ),
    _row(
        "A100 40GB PCIe", ["NVIDIA A100-PCIE-40GB"], kind="datacenter",
        bf16=312, fp16=312, tf32=156, fp32=19.5, gbps=1555, tdp=250,
        cite=f"{_A100_DS}, A100 40GB PCIe: BF16 312 | 624*, TF32 156 | 312*, 1,555 GB/s, 250 W; "
        f"no FP8); {_NOT_READ}; cross-checked: thundercompute.com A100 specs.",
    ),
    _row(
        "A800 80GB SXM", ["NVIDIA A800-SXM4-80GB"], kind="datacenter",
        bf16=312, fp16=312, tf32=156, fp32=19.5, gbps=2039, tdp=400,
        cite="NVIDIA A800 datasheet (China market; the A100 80GB SXM with NVLink cut to 400 "
        f"GB/s, tensor rates unchanged: BF16 312 | 624*), {_NOT_READ}; cross-checked: "
        "citsjtu2020/LLM-Prof hardware_spec.md (A800_SXM4_80GB 312e12, 2,039 GB/s).",
    ),
    _row(
        "A800 80GB PCIe", ["NVIDIA A800 80GB PCIe"], kind="datacenter",
        bf16=312, fp16=312, tf32=156, fp32=19.5, gbps=1935, tdp=300,
        cite="NVIDIA A800 PCIe datasheet (China market; the A100 80GB PCIe with NVLink cut, "
        f"tensor rates unchanged: BF16 312 | 624*, 1,935 GB/s, 300 W), {_NOT_READ}; figures as "
        "the A100 80GB PCIe row.",
    ),
    _row(
        "A40", ["NVIDIA A40"], kind="datacenter",
        bf16=149.7, fp16=149.7, tf32=74.8, fp32=37.4, gbps=696, tdp=300,
        cite="NVIDIA A40 datasheet, https://www.nvidia.com/en-us/data-center/a40/ (specifications: "
        "BF16 149.7 | 299.4*, FP16 149.7 | 299.4*, TF32 74.8 | 149.6*, FP32 37.4, 696 GB/s, "
        f"300 W; no FP8); {_NOT_READ}; "
        "cross-checked: Lightning throughput.py _CUDA_FLOPS (a40: tf32 74.8e12, int8 299.3e12 "
        "dense), the existing RTX A6000 row (same GA102).",
    ),
    _row(
        "A30", ["NVIDIA A30"], kind="datacenter",
        bf16=165, fp16=165, tf32=82, fp32=10.3, gbps=933, tdp=165,
        cite="NVIDIA A30 datasheet, https://www.nvidia.com/en-us/data-center/products/a30-gpu/ "
        "(specifications: BF16 165 | 330*, FP16 165 | 330*, TF32 82 | 165*, FP32 10.3, 933 "
        f"GB/s, 165 W; no FP8); {_NOT_READ}; cross-checked: calwoo.github.io NVIDIA GPU quick "
        "reference (A30 FP16 165).",
    ),
    _row(
        "A10", ["NVIDIA A10"], kind="datacenter",
        bf16=125, fp16=125, tf32=62.5, fp32=31.2, gbps=600, tdp=150,
        cite="NVIDIA A10 datasheet, https://www.nvidia.com/content/dam/en-zz/Solutions/"
        "Data-Center/a10/pdf/a10-datasheet.pdf (spec table: BF16 125 | 250*, TF32 62.5 | 125*, "
        f"FP32 31.2, 600 GB/s, 150 W; no FP8); {_NOT_READ}; cross-checked: sysrqmts.com A10 "
        "(600.2 GB/s, FP32 31.24), Lightning throughput.py (a10g entry cites this datasheet).",
    ),
    _row(
        "A16 (one of four GPUs)", ["NVIDIA A16"], kind="datacenter",
        bf16=17.9, fp16=17.9, tf32=9, fp32=4.5, gbps=200, tdp=62.5,
        cite="NVIDIA A16 datasheet, https://www.nvidia.com/en-us/data-center/products/a16-gpu/ "
        "(per board of 4 GPUs: BF16 4x 17.9 | 4x 35.9*, TF32 4x 9 | 4x 18*, FP32 4x 4.5, "
        "4x 200 GB/s, 250 W; each GPU is its own NVML device, so per GPU: /4 for power, /2 "
        f"for dense); {_NOT_READ}; cross-checked by arithmetic: 10 SMs x 1024 FLOP/clk x 1.755 "
        "GHz = 18.0 TFLOP/s, as the A10's 125 = 72 SMs x 1024 x 1.695 GHz.",
    ),
    _row(
        "A2", ["NVIDIA A2"], kind="datacenter",
        bf16=18, fp16=18, tf32=9, fp32=4.5, gbps=200, tdp=60,
        cite="NVIDIA A2 datasheet, https://www.nvidia.com/en-us/data-center/products/a2/ "
        "(specifications: BF16 18 | 36*, FP16 18 | 36*, TF32 9 | 18*, FP32 4.5, 200 GB/s, "
        f"40-60 W configurable; no FP8); {_NOT_READ}; cross-checked by arithmetic: 10 SMs x "
        "1024 FLOP/clk x 1.77 GHz = 18.1 TFLOP/s.",
    ),
    # ---------------------------------------------------------------- datacenter: Turing, Volta
    _row(
        "T4", ["Tesla T4", "NVIDIA T4"], kind="datacenter",
        fp16=65, fp32=8.1, gbps=320, tdp=70,
        cite="NVIDIA T4 datasheet, https://www.nvidia.com/content/dam/en-zz/Solutions/"
        "Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf (mixed precision FP16/FP32 "
        f"65 TFLOPS, FP32 8.1, 320 GB/s, 70 W; no BF16, TF32 or FP8, no sparsity); {_NOT_READ}; "
        "cross-checked: sysrqmts.com T4 (65.13 FP16, 320 GB/s), Lightning throughput.py.",
    ),
    _row(
        "V100S PCIe", _tesla("V100S-PCIE-32GB"), kind="datacenter",
        fp16=130, fp32=16.4, gbps=1134, tdp=250,
        cite="NVIDIA V100 datasheet, https://images.nvidia.com/content/technologies/volta/pdf/"
        "volta-v100-datasheet-update-us-1165301-r5.pdf (V100S PCIe: tensor performance 130 "
        f"TFLOPS, FP32 16.4, 1,134 GB/s, 250 W; no BF16, TF32 or FP8); {_NOT_READ}; "
        "cross-checked: Lightning throughput.py _CUDA_FLOPS (v100s-pcie 130e12, 16.4e12).",
    ),
    _row(
        "V100 SXM2", _tesla("V100-SXM2-16GB", "V100-SXM2-32GB"), kind="datacenter",
        fp16=125, fp32=15.7, gbps=900, tdp=300,
        cite="NVIDIA V100 datasheet, https://images.nvidia.com/content/technologies/volta/pdf/"
        "volta-v100-datasheet-update-us-1165301-r5.pdf (V100 SXM2: tensor performance 125 "
        f"TFLOPS, FP32 15.7, 900 GB/s, 300 W; no BF16, TF32 or FP8); {_NOT_READ}; "
        "cross-checked: NVIDIA A100 whitepaper comparison table as reproduced in public "
        "repositories (V100 Peak FP16 Tensor 125, 900 GB/sec), hmc-tech.com (125.34).",
    ),
    _row(
        "V100 PCIe", _tesla("V100-PCIE-16GB", "V100-PCIE-32GB"), kind="datacenter",
        fp16=112, fp32=14, gbps=900, tdp=250,
        cite="NVIDIA V100 datasheet, https://images.nvidia.com/content/technologies/volta/pdf/"
        "volta-v100-datasheet-update-us-1165301-r5.pdf (V100 PCIe: tensor performance 112 "
        f"TFLOPS, FP32 14, 900 GB/s, 250 W); {_NOT_READ}; cross-checked: Lightning "
        "throughput.py _CUDA_FLOPS (v100-pcie 112e12).",
    ),
    # ---------------------------------------------------------------- datacenter: AMD Instinct
    # Figures: CUs x FLOP per clock per CU x peak engine clock, as AMD's own MI300X table is
    # built (304 x 2048 x 2.1 GHz = 1307.4 BF16); AMD's product pages print the same figures
    # rounded ("2.5 PFLOPs") beside "with structured sparsity" ones at exactly twice.
    _row(
        "MI355X", ["AMD Instinct MI355X"], kind="datacenter", vendor="amd",
        bf16=2516.6, fp16=2516.6, fp8=5033.2, fp32=157.3, gbps=8000, tdp=1400,
        cite=f"{_amd_page('MI355X', 'mi350')}; {_NOT_READ}; read as quoted in stas00/"
        "ml-engineering (BF16 matrix 2.5 PFLOPS dense; FP16 matrix 5 and OCP-FP8 10.1 PFLOPS "
        f"with structured sparsity, exactly 2x dense; FP32 157.3). Stored: {_CDNA4} at the "
        "MI355X's 2.4 GHz peak engine clock (AMD at Hot Chips 2025, as reported by pudn.club): "
        "256 x 4096 x 2.4 GHz = 2516.6 BF16/FP16, 256 x 8192 x 2.4 = 5033.2 FP8, 256 x 256 x "
        "2.4 = 157.3 FP32; 8 TB/s and 1,400 W as AMD presented it at ISC 2025 (tomshardware."
        "com). No TF32. ROCm name assumed from the MI300X's.",
    ),
    _row(
        "MI350X", ["AMD Instinct MI350X"], kind="datacenter", vendor="amd",
        bf16=2306.9, fp16=2306.9, fp8=4613.7, fp32=144.2, gbps=8000, tdp=1000,
        cite=f"{_amd_page('MI350X', 'mi350')}; {_NOT_READ}. Stored: {_CDNA4} at the "
        "MI350X's 2.2 GHz peak engine clock (stas00/ml-engineering: the MI355X silicon at 2200 "
        "MHz and 1,000 W, FP32 144.2): 256 x 4096 x 2.2 GHz = 2306.9 BF16/FP16, 256 x 8192 x "
        "2.2 = 4613.7 FP8, 256 x 256 x 2.2 = 144.2 FP32; 8 TB/s and 1,000 W as AMD presented "
        "it at ISC 2025 (tomshardware.com). No TF32. ROCm name assumed from the MI300X's.",
    ),
    _row(
        "MI325X", ["AMD Instinct MI325X"], kind="datacenter", vendor="amd",
        bf16=1307.4, fp16=1307.4, tf32=653.7, fp8=2614.9, fp32=163.4, gbps=6000, tdp=1000,
        cite=f"{_amd_page('MI325X', 'mi300')}; {_NOT_READ}. Read in AMD's ROCm "
        f"documentation, {_ROCM_SPECS}: the MI325X is CDNA3 gfx942 with the MI300X's 304 CUs "
        "(38 per XCD), so the MI300X row's per-CU rates; cross-checked: svethardware.cz (same "
        "2,100 MHz clock, 6 TB/s, TBP 1,000 W), awesomeagents.ai MI325X specifications (BF16 "
        "1,307.4, FP8 2,614.9 dense and 5,229.8 with sparsity, TF32 653.7, FP32 163.4, 6 TB/s, "
        "1,000 W), stas00/ml-engineering (MI325X: same compute as MI300X). ROCm name assumed.",
    ),
    _row(
        "MI300X", ["AMD Instinct MI300X"], kind="datacenter", vendor="amd", verified=True,
        bf16=1307.4, fp16=1307.4, tf32=653.7, fp8=2614.9, fp32=163.4, gbps=5300, tdp=750,
        cite=f"Read in AMD's ROCm documentation, {_ROCM_MI300} (table \"Peak-performance "
        "capabilities of the MI300X\", no sparsity: Matrix FP16 and BF16 2048 FLOPS/clock/CU, "
        "1307.4 TFLOPS; Matrix FP8 4096, 2614.9; TF32 1024, 653.7; Matrix and Vector FP32 256, "
        "163.4; peak memory bandwidth 5.3 TB/s) and in AMD's MLPerf Inference v4.1 system "
        "description, https://github.com/mlcommons/inference_results_v4.1/blob/main/closed/AMD"
        "/systems/8xMI300X_2xEPYC-9374F.json (accelerator \"AMD Instinct MI300X-NPS1-SPX-"
        f"192GB-750W\": 750 W). Not read: {_amd_page('MI300X', 'mi300')}. ROCm name: "
        "torch reports \"AMD Instinct MI300X\" (ROCm/ROCm issue 4203).",
    ),
    # ---------------------------------------------------------------- workstation
    _row(
        "RTX PRO 6000 Blackwell Workstation",
        ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"], kind="workstation",
        bf16=503.8, fp16=503.8, fp32=125, gbps=1792, tdp=600,
        cite="NVIDIA RTX Blackwell PRO GPU Architecture whitepaper, https://www.nvidia.com/"
        "content/dam/en-zz/Solutions/design-visualization/quadro-product-literature/"
        "NVIDIA-RTX-Blackwell-PRO-GPU-Architecture-v1.0.pdf (Table 4: Peak BF16 Tensor TFLOPS "
        f"with FP32 Accumulate 503.8 dense, 1,792 GB/s, 600 W); {_NOT_READ}; the Table 4 "
        "figures were read as quoted in a public hardware note (RunPod comparison); "
        "cross-checked by arithmetic: 188 SMs x 1024 FLOP/clk x 2.617 GHz = 503.8, FP32 125 = "
        "188 SMs x 256 FLOP/clk x 2.617 GHz (125.9; product page 125, not read). TF32 and FP8 "
        "not stored: no figure read. Max-Q (300 W) and Server editions are not this row.",
    ),
    _row(
        "RTX 6000 Ada", ["NVIDIA RTX 6000 Ada Generation"], kind="workstation",
        bf16=364.25, fp16=364.25, tf32=182.1, fp8=728.5, fp32=91.1, gbps=960, tdp=300,
        cite="NVIDIA RTX 6000 Ada Generation datasheet, https://www.nvidia.com/en-us/"
        "design-visualization/rtx-6000/ (single-precision 91.1 TFLOPS, tensor performance "
        "1,457.0 TFLOPS* = FP8 with sparsity, 960 GB/s, 300 W; FP8 dense = /2, BF16 dense = "
        f"/4); {_NOT_READ}; cross-checked: the RTX PRO Blackwell whitepaper Table 4 as quoted "
        "in a public hardware note (RTX 6000 Ada BF16 with FP32 accumulate 364 / 728*), "
        "Lightning throughput.py (6000ada tf32 182.1e12), 142 SMs x 1024 x 2.505 GHz = 364.2.",
    ),
    _row(
        "RTX 5000 Ada", ["NVIDIA RTX 5000 Ada Generation"], kind="workstation",
        bf16=261.1, fp16=261.1, tf32=130.6, fp8=522.2, fp32=65.3, gbps=576, tdp=250,
        cite="NVIDIA RTX 5000 Ada Generation datasheet, https://www.nvidia.com/en-us/"
        "design-visualization/rtx-5000/ (single-precision 65.3 TFLOPS, tensor performance "
        "1,044.4 TFLOPS* = FP8 with sparsity, 32 GB at 576 GB/s, 250 W; FP8 dense = /2, BF16 "
        f"dense = /4, TF32 = /8); {_NOT_READ}; cross-checked by arithmetic: 100 SMs x 1024 "
        "FLOP/clk x 2.55 GHz = 261.1.",
    ),
    _row(
        "RTX A6000", ["NVIDIA RTX A6000"], kind="workstation",
        bf16=154.8, fp16=154.8, tf32=77.4, fp32=38.7, gbps=768, tdp=300,
        cite=f"{_GA102_WP} (Table 3, RTX A6000: Peak BF16 Tensor TFLOPS with FP32 Accumulate "
        "154.8/309.6*, TF32 77.4/154.8*); NVIDIA RTX A6000 datasheet, https://www.nvidia.com/"
        "en-us/design-visualization/rtx-a6000/ (tensor performance 309.7 TFLOPS*, FP32 38.7, "
        f"768 GB/s, 300 W); {_NOT_READ}; the whitepaper figure was read as quoted in a public "
        "training guide; cross-checked: Lightning throughput.py (a6000 tf32 77.4e12). No FP8.",
    ),
    _row(
        "RTX A5000", ["NVIDIA RTX A5000"], kind="workstation",
        bf16=111.1, fp16=111.1, fp32=27.8, gbps=768, tdp=230,
        cite="NVIDIA RTX A5000 datasheet, https://www.nvidia.com/en-us/design-visualization/"
        "rtx-a5000/ (tensor performance 222.2 TFLOPS* = FP16 with sparsity, FP32 27.8, 24 GB "
        f"at 768 GB/s, 230 W; /2 for dense); {_NOT_READ}; cross-checked by arithmetic: 64 SMs "
        "x 1024 FLOP/clk x 1.695 GHz = 111.1 (the RTX A6000's full-rate FP32 accumulate: "
        "154.8 = 84 x 1024 x 1.8 GHz). No TF32 figure given: none stored. No FP8.",
    ),
    _row(
        "RTX A4000", ["NVIDIA RTX A4000"], kind="workstation",
        bf16=76.7, fp16=76.7, fp32=19.2, gbps=448, tdp=140,
        cite="NVIDIA RTX A4000 datasheet, https://www.nvidia.com/en-us/design-visualization/"
        "rtx-a4000/ (tensor performance 153.4 TFLOPS* = FP16 with sparsity, FP32 19.2, 16 GB "
        f"at 448 GB/s, 140 W; /2 for dense); {_NOT_READ}; cross-checked by arithmetic: 48 SMs "
        "x 1024 FLOP/clk x 1.56 GHz = 76.7. No TF32 figure given: none stored. No FP8.",
    ),
    # ---------------------------------------------------------------- GeForce
    _row(
        "GeForce RTX 5090", ["NVIDIA GeForce RTX 5090"], kind="geforce",
        bf16=209.5, fp16=209.5, tf32=104.8, fp8=419, fp32=104.8, gbps=1792, tdp=575,
        cite=f"{_RTX_BW_WP} (Table 3, RTX 5090: Peak BF16/FP16 Tensor TFLOPS with FP32 "
        "Accumulate 209.5/419*, FP8 with FP32 Accumulate 419/838*, TF32 104.8/209.5*, FP32 "
        f"104.8, 1,792 GB/s, 575 W); {_NOT_READ}; the Table 3 figures were read as quoted in "
        "public notes (209.5/419 for BF16 with FP32 accumulate); cross-checked: 170 SMs x 512 "
        "FLOP/clk x 2.407 GHz = 209.5. The FP16-accumulate 419 and the 3,352 AI TOPS are other "
        "arithmetic.",
    ),
    _row(
        "GeForce RTX 4090", ["NVIDIA GeForce RTX 4090"], kind="geforce",
        bf16=165.2, fp16=165.2, tf32=82.6, fp8=330.3, fp32=82.6, gbps=1008, tdp=450,
        cite=f"{_ADA_WP} (Appendix A, Table 2, RTX 4090: Peak FP16/BF16 Tensor TFLOPS with FP32 "
        "Accumulate 165.2/330.4*, FP8 with FP32 Accumulate 330.3/660.6* (corrected in v2.02), "
        f"TF32 82.6/165.2*, FP32 82.6, 1,008 GB/s, 450 W); {_NOT_READ}; the appendix was read "
        "as quoted in public repositories; cross-checked: nanochat common.py (165.2e12), "
        "llm.c mfu.h (ADA 165.2).",
    ),
    _row(
        "GeForce RTX 4080", ["NVIDIA GeForce RTX 4080"], kind="geforce",
        bf16=97.5, fp16=97.5, tf32=48.7, fp8=194.9, fp32=48.7, gbps=716.8, tdp=320,
        cite=f"{_ADA_WP} (Appendix A, RTX 4080 16GB: Peak FP16/BF16 Tensor TFLOPS with FP32 "
        "Accumulate 97.5/194.9*, FP8 with FP32 Accumulate 194.9/389.9*, TF32 48.7/97.5*, FP32 "
        f"48.7, 716.8 GB/s, 320 W); {_NOT_READ}; cross-checked: llm.c mfu.h (\"4080: 304 TCs, "
        "2505 MHz; 97.5 TFlops\" against the spec sheet).",
    ),
    _row(
        "GeForce RTX 3090 Ti", ["NVIDIA GeForce RTX 3090 Ti"], kind="geforce",
        bf16=80, fp16=80, tf32=40, fp32=40, gbps=1008, tdp=450,
        cite="NVIDIA GeForce RTX 3090 Ti specifications, https://www.nvidia.com/en-us/geforce/"
        "graphics-cards/30-series/rtx-3090-3090ti/ (320 AI TOPS = INT8 dense, FP32 40 "
        "TFLOPS, 1,008 GB/s, 450 W); no whitepaper covers the 3090 Ti: FP16/BF16 with FP32 "
        "accumulate = INT8 dense / 4 on GA102 GeForce (the 3090's 284 TOPS vs 71 TFLOPS in "
        f"the GA102 whitepaper); {_NOT_READ}; cross-checked: llm.c mfu.h (80 at 336 TCs, "
        "1860 MHz), Lightning throughput.py (rtx 3090 ti int8 320e12). No FP8.",
    ),
    _row(
        "GeForce RTX 3090", ["NVIDIA GeForce RTX 3090"], kind="geforce",
        bf16=71.2, fp16=71.2, tf32=35.6, fp32=35.6, gbps=936, tdp=350,
        cite=f"{_GA102_WP} (Appendix A, Table 9, RTX 3090: Peak FP16/BF16 Tensor TFLOPS with "
        "FP32 Accumulate 71/142*, TF32 35.6/71*, FP32 35.6, 936 GB/s, 350 W); the RTX "
        f"Blackwell whitepaper Table 3 prints 71.2/142.4; {_NOT_READ}; both tables were read "
        "as quoted in public notes; cross-checked: 82 SMs x 512 FLOP/clk x 1.695 GHz = 71.2. "
        "No FP8.",
    ),
)
# fmt: on


def rows() -> tuple[DeviceRow, ...]:
    """Every row of the peak table in its stable order (for ``tm peaks`` and ``tm doctor``).

    Order: datacenter (NVIDIA, then AMD Instinct), then workstation, then GeForce parts, newest
    first within each. Patterns are anchored literals, so the order never changes which row a
    name matches.
    """
    return _ROWS


def table() -> tuple[dict[str, Any], ...]:
    """The peak table as plain data, one dict per row, in the order of ``rows()``.

    Each dict has label, kind, vendor, names, pattern, tflops ({dtype: dense TFLOP/s or None}
    for every dtype in DTYPES), mem_bw (bytes/s), tdp_w (W), verified and citation: all a
    printer needs.
    """
    return tuple(row.as_dict() for row in _ROWS)


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
    """The table row whose listed device name ``name`` is, or None.

    Input: a name as the driver reports it: NVML's ``nvmlDeviceGetName`` ("NVIDIA H100 80GB
    HBM3"), or torch's device name on ROCm ("AMD Instinct MI300X").
    Rule: the row whose anchored pattern matches the whole name, case-insensitively, after
    collapsing runs of whitespace (first in table order; no two rows share a name). No substring
    matching: look-alikes ("NVIDIA L40S" vs L40 vs L4, "NVIDIA H200 NVL" vs H200, "NVIDIA GH200
    480GB" vs H200, "NVIDIA A10G" vs A10, "NVIDIA GeForce RTX 4090 D" vs 4090, a MIG slice
    "... MIG 1g.5gb" vs its GPU) resolve to their own row or to None. Every listed name starts
    with its vendor's word ("NVIDIA", "Tesla", "AMD"), so an NVML name never matches an AMD row.
    Raises: nothing; None, "", "cpu" or any unknown name gives None.
    """
    if not isinstance(name, str) or not name.strip():
        return None
    for row in _ROWS:
        if row.matches(name):
            return row
    return None


# Short names a person types for a GPU that the rules of ``_derived_names`` do not give. Each
# names exactly one row by its label.
_GPU_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        # NVML "NVIDIA H200" and "NVIDIA H800" are the SXM boards (their rows' citations).
        "h200": "H200 SXM",
        "h800": "H800 SXM",
        # "A100 80GB" / "A800 80GB" as rented by the hour: the SXM board; the PCIe cards are
        # a100-80gb-pcie, a100-40gb-pcie, a800-80gb-pcie (same BF16 peak, lower board power).
        "a100-80gb": "A100 80GB SXM",
        "a100-40gb": "A100 40GB SXM",
        "a800-80gb": "A800 80GB SXM",
        # the two GH200 rows differ in GPU memory only; their labels' parentheses do not slug
        # to a unique short form
        "gh200-96gb": "GH200 (96 GB HBM3)",
        "gh200-144gb": "GH200 (144 GB HBM3e)",
    }
)

_SHORT, _DEVICE = "short", "device"  # what a name of the index was derived from


def slug(text: str) -> str:
    """``text`` compared as a GPU name: lower case, each run of characters other than a-z and 0-9
    made one "-", none at the ends ("H100 SXM", "h100_sxm" -> "h100-sxm")."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _vendorless(key: str, vendor: str) -> str | None:
    """``key`` without the vendor's leading word ("nvidia-h100-sxm" -> "h100-sxm"), or None."""
    for word in _VENDOR_WORDS[vendor]:
        if key.startswith(word) and len(key) > len(word):
            return key[len(word) :]
    return None


def _derived_names(row: DeviceRow):
    """(slug, kind, how) for every name the rules derive from one row; see ``find_gpu``."""
    label = slug(row.label)
    yield label, _SHORT, "the label"
    yield slug(re.sub(r"\(.*?\)", " ", row.label)), _SHORT, "the label without its parentheses"
    if row.kind == "geforce":
        yield label.removeprefix("geforce-"), _SHORT, "the label without GeForce"
    source = NAME_SOURCE[row.vendor]
    for name in row.names:
        yield slug(name), _DEVICE, f"the {source} name {name!r}"
        bare = _vendorless(slug(name), row.vendor)
        if bare:
            yield bare, _DEVICE, f"the {source} name {name!r} without the vendor's word"


def _name_index() -> Mapping[str, tuple[DeviceRow, str, str]]:
    """{slug: (row, kind, how)}: a derived name claimed by two rows names neither (ambiguous)."""
    claims: dict[str, dict[str, tuple[DeviceRow, str, str]]] = {}
    for row in _ROWS:
        for key, kind, how in _derived_names(row):
            claims.setdefault(key, {}).setdefault(row.label, (row, kind, how))
    index = {key: next(iter(c.values())) for key, c in claims.items() if len(c) == 1}
    by_label = {row.label: row for row in _ROWS}
    for alias, label in _GPU_ALIASES.items():
        if set(claims.get(alias, {label: None})) != {label}:
            raise ValueError(f"GPU alias {alias!r} is also a name of {sorted(claims[alias])}")
        index.setdefault(alias, (by_label[label], _SHORT, "an alias"))
    return MappingProxyType(index)


_NAMES = _name_index()


def _lookup(name: str) -> tuple[DeviceRow, str, str] | None:
    """(row, the slug found, how it names the row) for a typed name, or None; see find_gpu."""
    key = slug(name)
    if key in _NAMES:
        return _NAMES[key][0], key, _NAMES[key][2]
    for vendor in VENDORS:
        bare = _vendorless(key, vendor)
        found = _NAMES.get(bare) if bare else None
        if found is not None and found[0].vendor == vendor:
            return found[0], bare, found[2]
    return None


def find_gpu(name: str | None) -> DeviceRow | None:
    """The table row for a GPU as a person names it, or None: the one rule for typed names.

    Used by ``--device`` (``tm``, ``%%trainmeter``), ``tm plan --gpu``, ``tm peaks NAME`` and
    ``resolve_peak`` (so the engine). Input, in this order:
    1. a listed device name, matched as ``match_device`` does ("NVIDIA H100 80GB HBM3", "AMD
       Instinct MI300X");
    2. otherwise compared after ``slug`` (case and punctuation ignored) with the names derived
       from the table: each row's label ("H100 SXM" -> h100-sxm, "MI300X" -> mi300x); its label
       without a parenthesised part ("B200 (HGX)" -> b200); a GeForce label without "geforce"
       (rtx-4090); each listed device name and that name without its vendor's word
       (a100-sxm4-80gb, h200); the aliases of ``_GPU_ALIASES`` (a100-80gb, gh200-96gb). A name
       two rows derive ("gh200") names neither. A leading vendor word ("NVIDIA H100 SXM", "AMD
       MI300X") is ignored, and then only that vendor's rows are searched: "NVIDIA MI300X" and
       "AMD H100 SXM" are unknown.
    Returns None for an unknown or ambiguous name ("h100": SXM, PCIe or NVL? "gh200", "a10g",
    "mi300"), None or "": never a guessed row, never a substring. Raises: nothing.
    """
    found = match_gpu(name)
    return None if found is None else found[0]


def match_gpu(name: str | None) -> tuple[DeviceRow, str] | None:
    """``find_gpu``'s row and one sentence saying which rule matched (for ``tm peaks NAME``).

    Returns ``(row, why)``, or None where ``find_gpu`` gives None. Raises: nothing.
    """
    row = match_device(name)
    if row is not None:
        asked = _clean(name).lower()
        listed = next((n for n in row.names if n.lower() == asked), row.names[0])
        return row, (f"{name!r} is the {NAME_SOURCE[row.vendor]} name {listed!r} listed for "
                     f"{row.label} (exact match; case and repeated spaces ignored, never a "
                     "substring)")  # fmt: skip
    found = _lookup(name) if isinstance(name, str) else None
    if found is None:
        return None
    row, key, how = found
    return row, (f"{name!r} reads {key!r}: {how} of {row.label} (case and punctuation "
                 "ignored, never a substring)")  # fmt: skip


def gpu_short_names() -> dict[str, str]:
    """The short GPU names ``find_gpu`` accepts, with the row label each stands for.

    Short names are the label-derived ones and the aliases (rule 2 of ``find_gpu``: "h100-sxm",
    "b200", "rtx-4090", "mi300x", "a100-80gb"); the slugs of listed device names are accepted
    too but not listed here. Returns: ``{short name: row label}`` in table order of the rows.
    Source: this table.
    """
    order = {row.label: i for i, row in enumerate(_ROWS)}
    short = {k: v[0] for k, v in _NAMES.items() if v[1] == _SHORT or k in _GPU_ALIASES}
    pairs = sorted(short.items(), key=lambda kv: (order[kv[1].label], kv[0]))
    return {name: row.label for name, row in pairs}


def close_gpu_names(name: str, n: int = 3) -> list[str]:
    """Short names (``gpu_short_names``) a person may have meant by an unknown ``name``.

    Rule, after ``slug`` and dropping a leading vendor word: the short names that extend it by a
    suffix ("h100" -> "h100-sxm", "h100-pcie", "h100-nvl"; "gh200" -> "gh200-96gb", ...), all
    of them; else up to ``n`` look-alikes by ``difflib.get_close_matches`` (cutoff 0.75). For an
    error message only: never used as a match.
    """
    key = slug(name) if isinstance(name, str) else ""
    key = next((b for v in VENDORS if (b := _vendorless(key, v))), key)
    if not key:
        return []
    short = list(gpu_short_names())
    extending = [s for s in short if s.startswith(key + "-")]
    return extending or difflib.get_close_matches(key, short, n=n, cutoff=0.75)


class UnknownGPUError(ValueError):
    """A typed GPU name the table does not know (``check_gpu``); the message names close ones."""


def unknown_gpu(name: str) -> str:
    """The one line for an unknown GPU name: the close short names, ``tm peaks`` and --peak."""
    close = close_gpu_names(name)
    which = f" (did you mean {', '.join(close)}?)" if close else ""
    return (f"unknown GPU {quoted(name)}{which}: not in the peaks table (tm peaks lists it); "
            "pass --peak with its dense FLOP/s (989.5T)")  # fmt: skip


def check_gpu(name: str | None, declared_flops: float | None = None) -> DeviceRow | None:
    """A typed GPU name (``--device``, ``tm plan --gpu``) checked before anything runs.

    Returns the row ``find_gpu`` gives; None when ``name`` is None or "", or when it is unknown
    but a peak is declared (``--peak``: the name then only labels that peak).
    Raises: UnknownGPUError (a ValueError, message ``unknown_gpu``) for an unknown or ambiguous
    name without a declared peak, which would otherwise silently give no peak and no MFU.
    """
    if not name:
        return None
    row = find_gpu(name)
    if row is None and declared_flops is None:
        raise UnknownGPUError(unknown_gpu(name))
    return row


def resolve_peak(
    device: str | None, dtype: str | None, declared_flops: float | None = None
) -> ResolvedPeak | None:
    """The dense peak (FLOP/s, one device) that MFU divides by, or None for "no MFU".

    Inputs: ``device``, a GPU name in any form ``find_gpu`` takes (the NVML name, torch's name on
    ROCm, or a typed ``--device``: "H100 SXM", "h100-sxm"; "cpu" or None when there is no
    accelerator); ``dtype``, the
    run's compute dtype (a DTYPES name or an alias such as "torch.bfloat16"); ``declared_flops``,
    a peak in FLOP/s typed by the user (``--peak``).
    Rule: a declared peak always wins and is labelled ``source="declared"``; otherwise the table
    row ``find_gpu`` gives has its dense rate for the dtype (``source="table"``).
    Returns None for an unknown device, a missing or unknown dtype, or a dtype the card has no
    rate for (FP8 on an A100, BF16 on a T4): never another card's value, never infinity.
    Raises: ValueError when ``declared_flops`` is not a finite number > 0.
    Source: the table rows (each cited); docs/spec.md "Peaks".
    """
    if declared_flops is not None:
        return _declared(device, dtype, declared_flops)
    name = normalize_dtype(dtype)
    row = find_gpu(device)
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
    "KINDS",
    "NAME_SOURCE",
    "VENDORS",
    "DeviceRow",
    "ResolvedPeak",
    "UnknownGPUError",
    "check_gpu",
    "close_gpu_names",
    "find_gpu",
    "gpu_short_names",
    "match_device",
    "match_gpu",
    "normalize_dtype",
    "resolve_peak",
    "rows",
    "slug",
    "table",
    "unknown_gpu",
]
