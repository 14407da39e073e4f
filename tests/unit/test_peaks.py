"""Dense peaks matched from NVML names.

Expected values are the datasheets' 2:4-sparse headline figures halved by hand (the comment on
each case gives the headline), or the datasheet's dense figure where it prints one; they are
independent of the table's own numbers. Rows whose datasheet could not be read here carry
``verified=False`` in the table; the figures below were checked against the sources its
citation names.
"""

from __future__ import annotations

import math
import re

import pytest

from trainmeter.core.peaks import DTYPES, match_device, resolve_peak, rows

T = 1e12


@pytest.mark.parametrize(
    ("name", "dtype", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 1979 / 2 * T),  # H100 SXM: 1,979* -> 989.5
        ("NVIDIA H100 80GB HBM3", "fp8", 3958 / 2 * T),  # 3,958* -> 1,979
        ("NVIDIA H100 80GB HBM3", "tf32", 989 / 2 * T),  # 989* -> 494.5
        ("NVIDIA H100 80GB HBM3", "fp32", 67 * T),  # non-tensor, no sparsity
        ("NVIDIA H100 PCIe", "bf16", 1513 / 2 * T),  # 1,513* -> 756.5
        ("NVIDIA H100 NVL", "bf16", 1671 / 2 * T),  # 1,671* -> 835.5
        ("NVIDIA H200", "bf16", 1979 / 2 * T),  # H200 SXM: 1,979* -> 989.5
        ("NVIDIA H200", "fp8", 3958 / 2 * T),
        ("NVIDIA H200 NVL", "bf16", 1671 / 2 * T),  # 1,671* -> 835.5
        ("NVIDIA A100-SXM4-40GB", "bf16", 624 / 2 * T),  # 624* -> 312
        ("NVIDIA A100-SXM4-40GB", "tf32", 312 / 2 * T),  # 312* -> 156
        ("NVIDIA A100-SXM4-80GB", "fp16", 624 / 2 * T),
        ("NVIDIA A100 80GB PCIe", "bf16", 624 / 2 * T),
        ("NVIDIA A100-PCIE-40GB", "bf16", 624 / 2 * T),
        ("NVIDIA L40S", "bf16", 362.05 * T),  # datasheet prints dense 362.05 (733* beside it)
        ("NVIDIA L40S", "fp8", 1466 / 2 * T),  # 1,466* -> 733
        ("NVIDIA L40", "bf16", 362.1 / 2 * T),  # 362.1* -> 181.05
        ("NVIDIA L4", "bf16", 242 / 2 * T),  # 242* -> 121
        ("NVIDIA L4", "fp8", 485 / 2 * T),  # 485* -> 242.5
        ("NVIDIA A10", "bf16", 250 / 2 * T),  # 250* -> 125
        ("NVIDIA GeForce RTX 4090", "bf16", 165.2 * T),  # Ada whitepaper, FP32 accumulate
        ("NVIDIA RTX A6000", "bf16", 309.7 / 2 * T),  # tensor performance 309.7* -> 154.85
        ("Tesla T4", "fp16", 65 * T),  # mixed precision, no sparsity on Turing
        ("Tesla V100-SXM2-16GB", "fp16", 125 * T),
        ("Tesla V100-SXM2-32GB", "fp16", 125 * T),
        ("Tesla V100-PCIE-32GB", "fp16", 112 * T),
        ("NVIDIA B200", "bf16", 4500 / 2 * T),  # HGX B200: 4.5 PFLOPS* -> 2.25 P
        ("NVIDIA GB200", "bf16", 360_000 / 72 / 2 * T),  # NVL72: 360 PFLOPS* / 72 GPUs -> 2.5 P
    ],
)
def test_nvml_name_gives_the_dense_datasheet_peak(name, dtype, expected):
    peak = resolve_peak(name, dtype)
    assert peak is not None
    assert peak.source == "table"
    assert peak.dtype == dtype
    assert peak.flops == pytest.approx(expected, rel=1e-9)


def test_h100_sxm_bf16_is_dense_not_the_sparse_headline():
    peak = resolve_peak("NVIDIA H100 80GB HBM3", "bf16")
    assert peak.flops == 989.5e12
    assert peak.flops != 1979e12


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA GH200 480GB", None),  # not an H200 nor an H100: no figure checked
        ("NVIDIA GH200 144G HBM3e", None),
        ("NVIDIA A10G", None),  # AWS part, no datasheet: never the A10's figure
        ("NVIDIA A10", "A10"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
        ("NVIDIA H100", None),  # too vague to choose between SXM, PCIe and NVL
        ("NVIDIA B200", "B200 (HGX)"),
        ("NVIDIA GB200", "GB200 (per GPU)"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
        ("NVIDIA GeForce RTX 4090 D", None),
        ("NVIDIA RTX A6000", "RTX A6000"),
        ("NVIDIA RTX 6000 Ada Generation", None),
        ("Tesla T4", "T4"),
        ("NVIDIA T4", "T4"),
        ("Tesla V100S-PCIE-32GB", None),
        ("  nvidia   l40s ", "L40S"),  # case and spacing do not matter
        ("cpu", None),
        ("", None),
        (None, None),
    ],
)
def test_look_alike_names_resolve_to_their_own_row_or_none(name, label):
    row = match_device(name)
    assert (row.label if row else None) == label


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("NVIDIA A10G", "bf16"),  # unknown device
        ("NVIDIA GH200 480GB", "bf16"),
        ("Some Future GPU", "bf16"),
        ("cpu", "fp32"),
        (None, "bf16"),
        ("NVIDIA A100-SXM4-80GB", "fp8"),  # Ampere has no FP8 rate
        ("Tesla T4", "bf16"),  # Turing has no BF16 rate
        ("Tesla V100-SXM2-16GB", "tf32"),
        ("NVIDIA H100 80GB HBM3", "int8"),  # not a dtype trainmeter tracks
        ("NVIDIA H100 80GB HBM3", None),  # dtype not known yet
    ],
)
def test_unknown_device_or_missing_dtype_gives_no_peak(name, dtype):
    assert resolve_peak(name, dtype) is None


def test_unknown_gpu_gives_no_mfu_peak_never_infinity_or_a100():
    assert resolve_peak("NVIDIA Tesla K80", "fp32") is None


@pytest.mark.parametrize("alias", ["bf16", "BF16", "bfloat16", "torch.bfloat16"])
def test_dtype_aliases_resolve_to_the_same_peak(alias):
    assert resolve_peak("NVIDIA A100-SXM4-80GB", alias).flops == 312e12


def test_declared_peak_wins_and_is_labelled_declared():
    peak = resolve_peak("NVIDIA H100 80GB HBM3", "bf16", declared_flops=800e12)
    assert peak.flops == 800e12
    assert peak.source == "declared"
    assert peak.citation == "declared by the user"
    assert peak.device == "NVIDIA H100 80GB HBM3"


def test_declared_peak_works_for_an_unknown_device_and_the_cpu():
    assert resolve_peak("NVIDIA A10G", "bf16", 70e12).flops == 70e12
    peak = resolve_peak("cpu", None, 1e12)
    assert (peak.flops, peak.source, peak.device, peak.dtype) == (
        1e12,
        "declared",
        "cpu",
        "unspecified",
    )
    assert resolve_peak(None, "fp32", 2e12).device == "unknown"


@pytest.mark.parametrize("bad", [0, -1e12, math.nan, math.inf, "312T", True])
def test_a_declared_peak_must_be_a_positive_finite_number(bad):
    with pytest.raises(ValueError, match="declared peak"):
        resolve_peak("NVIDIA H100 80GB HBM3", "bf16", bad)


def test_every_row_is_cited_and_well_formed():
    table = rows()
    assert isinstance(table, tuple) and len(table) >= 18
    labels = [row.label for row in table]
    assert len(labels) == len(set(labels))
    for row in table:
        re.compile(row.pattern)
        assert row.citation.startswith(("http", "NVIDIA")), row.label
        assert isinstance(row.verified, bool)
        assert set(row.tflops) <= set(DTYPES) and row.tflops, row.label
        assert all(v > 0 for v in row.tflops.values())
        assert row.mem_bw >= 100e9, row.label  # bytes/s: every part here has >= 100 GB/s
        assert row.tdp_w > 0


def test_unverified_rows_say_why_in_their_citation():
    for row in rows():
        if not row.verified:
            assert "not readable" in row.citation or "not read" in row.citation, row.label


@pytest.mark.parametrize(
    ("name", "bytes_per_s", "watts"),
    [
        ("NVIDIA H100 80GB HBM3", 3.35e12, 700),  # 3.35 TB/s, up to 700 W
        ("NVIDIA H200", 4.8e12, 700),  # 4.8 TB/s
        ("NVIDIA A100-SXM4-40GB", 1555e9, 400),  # 1,555 GB/s
        ("NVIDIA A100-SXM4-80GB", 2039e9, 400),  # 2,039 GB/s
        ("NVIDIA A100 80GB PCIe", 1935e9, 300),  # 1,935 GB/s
        ("NVIDIA L40S", 864e9, 350),
        ("NVIDIA L4", 300e9, 72),
        ("Tesla T4", 320e9, 70),
    ],
)
def test_rows_carry_memory_bandwidth_in_bytes_per_second_and_board_power(name, bytes_per_s, watts):
    row = match_device(name)
    assert row.mem_bw == pytest.approx(bytes_per_s)
    assert row.tdp_w == watts
