"""Dense peaks matched from NVML names (and AMD Instinct rows matched from ROCm names).

Expected values are the datasheets' 2:4-sparse headline figures halved by hand (the comment on
each case names the document and the headline), or the dense figure where the document prints
one; they are independent of the table's own numbers. Rows whose datasheet could not be read here
carry ``verified=False`` in the table; the figures below were checked against the sources its
citation names.
"""

from __future__ import annotations

import math
import re

import pytest

from trainmeter.core.peaks import (
    DTYPES,
    KINDS,
    VENDORS,
    find_gpu,
    match_device,
    resolve_peak,
    rows,
    table,
)

T = 1e12

_ALL_NAMES = [(row.label, name) for row in rows() for name in row.names]


# ------------------------------------------------------------------ every NVML name in the table


@pytest.mark.parametrize(("label", "name"), _ALL_NAMES)
def test_every_nvml_name_in_the_table_resolves_to_its_own_row(label, name):
    assert match_device(name).label == label
    # the name as nvidia-smi may print it: any case, padded, runs of spaces
    assert match_device("  " + name.upper().replace(" ", "  ") + " ").label == label


@pytest.mark.parametrize(("label", "name"), _ALL_NAMES)
def test_no_name_is_claimed_by_two_rows(label, name):
    claimed = [row.label for row in rows() if row.matches(name)]
    assert claimed == [label]


@pytest.mark.parametrize(("label", "name"), _ALL_NAMES)
def test_a_mig_slice_or_a_suffixed_name_is_not_its_whole_gpu(label, name):
    # a MIG instance has a fraction of the GPU's peak: no table figure applies to it
    assert match_device(f"{name} MIG 1g.10gb") is None
    assert match_device(f"{name} D") is None
    assert match_device(f"{name} Laptop GPU") is None


@pytest.mark.parametrize(
    "name",
    [
        # real NVML names from the brief, each to its row
        "Tesla V100-SXM2-32GB",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA A100 80GB PCIe",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 PCIe",
        "NVIDIA H100 NVL",
        "NVIDIA H200",
        "NVIDIA H200 NVL",
        "NVIDIA GH200 480GB",
        "NVIDIA L40S",
        "NVIDIA L4",
        "NVIDIA GeForce RTX 4090",
        "NVIDIA RTX A6000",
        "NVIDIA RTX 6000 Ada Generation",
        "NVIDIA B200",
        "NVIDIA GB200",
    ],
)
def test_the_briefs_nvml_names_are_all_in_the_table(name):
    assert match_device(name) is not None


# ------------------------------------------------------------------ look-alikes, pinned


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L20", None),  # China part, figures not read: not an L40 nor an L4
        ("NVIDIA L2", None),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA GH200 480GB", "GH200 (96 GB HBM3)"),  # never the H200 nor the H100
        ("NVIDIA GH200 120GB", "GH200 (96 GB HBM3)"),
        ("NVIDIA GH200 144G HBM3e", "GH200 (144 GB HBM3e)"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),  # the SXM board, not the PCIe card
        ("NVIDIA H100", None),  # PCI id 2339: too vague to choose SXM, PCIe or NVL
        ("NVIDIA H800", "H800 SXM"),
        ("NVIDIA H800 PCIe", "H800 PCIe"),
        ("NVIDIA H800 NVL", None),
        ("NVIDIA H20", None),
        ("NVIDIA H20-3e", None),
        ("NVIDIA A10G", None),  # AWS part, no datasheet: never the A10's figure
        ("NVIDIA A10M", None),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", None),  # a MIG slice is not the whole A100
        ("NVIDIA A100", None),
        ("NVIDIA RTX A1000", None),  # not an A100
        ("NVIDIA A800-SXM4-80GB", "A800 80GB SXM"),
        ("NVIDIA A800 40GB Active", None),  # a workstation card with other clocks
        ("NVIDIA A2", "A2"),
        ("NVIDIA A16", "A16 (one of four GPUs)"),
        ("NVIDIA B200", "B200 (HGX)"),
        ("NVIDIA B300 SXM6 AC", "B300 (HGX/DGX)"),
        ("NVIDIA GB200", "GB200 (per GPU)"),
        ("NVIDIA GB300", "GB300 (per GPU)"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
        ("NVIDIA GeForce RTX 4090 D", None),  # China variant, fewer SMs
        ("NVIDIA GeForce RTX 4090 Laptop GPU", None),
        ("NVIDIA GeForce RTX 4080 SUPER", None),
        ("NVIDIA GeForce RTX 4080", "GeForce RTX 4080"),
        ("NVIDIA GeForce RTX 5090 D", None),
        ("NVIDIA GeForce RTX 5090 D v2", None),
        ("NVIDIA GeForce RTX 3090 Ti", "GeForce RTX 3090 Ti"),
        ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090"),
        ("NVIDIA RTX A6000", "RTX A6000"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("NVIDIA RTX 6000D", None),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell Workstation"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", None),  # 300 W part
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", None),
        ("Tesla T4", "T4"),
        ("NVIDIA T4", "T4"),
        ("NVIDIA T400", None),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("  nvidia   l40s ", "L40S"),  # case and spacing do not matter
        ("cpu", None),
        ("", None),
        (None, None),
    ],
)
def test_look_alike_names_resolve_to_their_own_row_or_none(name, label):
    row = match_device(name)
    assert (row.label if row else None) == label


# ------------------------------------------------------------------ dense values, by hand


@pytest.mark.parametrize(
    ("name", "dtype", "expected"),
    [
        # H100 datasheet spec table: starred (sparse) figures, halved
        ("NVIDIA H100 80GB HBM3", "bf16", 1979 / 2 * T),  # H100 SXM: 1,979* -> 989.5
        ("NVIDIA H100 80GB HBM3", "fp8", 3958 / 2 * T),  # 3,958* -> 1,979
        ("NVIDIA H100 80GB HBM3", "tf32", 989 / 2 * T),  # 989* -> 494.5
        ("NVIDIA H100 80GB HBM3", "fp32", 67 * T),  # non-tensor, no sparsity
        ("NVIDIA H100 PCIe", "bf16", 1513 / 2 * T),  # 1,513* -> 756.5
        ("NVIDIA H100 NVL", "bf16", 1671 / 2 * T),  # 1,671* -> 835.5
        ("NVIDIA H800", "bf16", 1979 / 2 * T),  # the H100 SXM's tensor rates
        ("NVIDIA GH200 144G HBM3e", "bf16", 1979 / 2 * T),  # the H100 SXM's GPU
        # H200 page spec table
        ("NVIDIA H200", "bf16", 1979 / 2 * T),  # H200 SXM: 1,979* -> 989.5
        ("NVIDIA H200", "fp8", 3958 / 2 * T),
        ("NVIDIA H200 NVL", "bf16", 1671 / 2 * T),  # 1,671* -> 835.5
        # A100 datasheet: 312 | 624*
        ("NVIDIA A100-SXM4-40GB", "bf16", 624 / 2 * T),  # 624* -> 312
        ("NVIDIA A100-SXM4-40GB", "tf32", 312 / 2 * T),  # 312* -> 156
        ("NVIDIA A100-SXM4-80GB", "fp16", 624 / 2 * T),
        ("NVIDIA A100 80GB PCIe", "bf16", 624 / 2 * T),
        ("NVIDIA A100-PCIE-40GB", "bf16", 624 / 2 * T),
        ("NVIDIA A800-SXM4-80GB", "bf16", 624 / 2 * T),
        # other Ampere datacenter datasheets
        ("NVIDIA A30", "bf16", 330 / 2 * T),  # A30: BF16 165 | 330*
        ("NVIDIA A40", "bf16", 299.4 / 2 * T),  # A40: BF16 149.7 | 299.4*
        ("NVIDIA A10", "bf16", 250 / 2 * T),  # A10: 125 | 250*
        ("NVIDIA A2", "bf16", 36 / 2 * T),  # A2: 18 | 36*
        ("NVIDIA A16", "bf16", 17.9 * T),  # A16 prints dense 4x 17.9 (4x 35.9* beside it)
        # Ada datacenter datasheets
        ("NVIDIA L40S", "bf16", 362.05 * T),  # datasheet prints dense 362.05 (733* beside it)
        ("NVIDIA L40S", "fp8", 1466 / 2 * T),  # 1,466* -> 733
        ("NVIDIA L40", "bf16", 362.1 / 2 * T),  # 362.1* -> 181.05
        ("NVIDIA L4", "bf16", 242 / 2 * T),  # 242* -> 121
        ("NVIDIA L4", "fp8", 485 / 2 * T),  # 485* -> 242.5
        # Blackwell
        ("NVIDIA B200", "bf16", 4500 / 2 * T),  # HGX B200: 4.5 PFLOPS* -> 2.25 P
        ("NVIDIA B300 SXM6 AC", "bf16", 2250 * T),  # Exemplar README prints non-sparse 2,250
        ("NVIDIA B300 SXM6 AC", "fp8", 4500 * T),  # ... and 4,500
        ("NVIDIA GB200", "bf16", 360_000 / 72 / 2 * T),  # NVL72: 360 PFLOPS* / 72 GPUs -> 2.5 P
        ("NVIDIA GB200", "tf32", 180_000 / 72 / 2 * T),  # NVL72: 180 PFLOPS* -> 1.25 P
        ("NVIDIA GB300", "bf16", 360_000 / 72 / 2 * T),  # same BF16 peak as the GB200
        # Turing, Volta: no sparsity on these tensor cores
        ("Tesla T4", "fp16", 65 * T),  # mixed precision
        ("Tesla V100-SXM2-16GB", "fp16", 125 * T),
        ("Tesla V100-SXM2-32GB", "fp16", 125 * T),
        ("Tesla V100-PCIE-32GB", "fp16", 112 * T),
        ("Tesla V100S-PCIE-32GB", "fp16", 130 * T),
        # workstation datasheets: "tensor performance" is the sparse headline
        ("NVIDIA RTX A6000", "bf16", 309.6 / 2 * T),  # GA102 whitepaper Table 3: 154.8/309.6
        ("NVIDIA RTX A5000", "bf16", 222.2 / 2 * T),  # tensor performance 222.2* (FP16)
        ("NVIDIA RTX A4000", "bf16", 153.4 / 2 * T),  # tensor performance 153.4* (FP16)
        ("NVIDIA RTX 6000 Ada Generation", "bf16", 1457.0 / 4 * T),  # 1,457.0* is FP8 sparse
        ("NVIDIA RTX 6000 Ada Generation", "fp8", 1457.0 / 2 * T),
        ("NVIDIA RTX 5000 Ada Generation", "bf16", 1044.4 / 4 * T),  # 1,044.4* is FP8 sparse
        (
            "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            "bf16",
            503.8 * T,  # RTX PRO Blackwell whitepaper Table 4 prints dense 503.8
        ),
        # GeForce whitepapers: BF16 with FP32 accumulate, dense/sparse
        ("NVIDIA GeForce RTX 5090", "bf16", 419 / 2 * T),  # RTX Blackwell WP: 209.5/419*
        ("NVIDIA GeForce RTX 4090", "bf16", 330.4 / 2 * T),  # Ada WP Appendix A: 165.2/330.4*
        ("NVIDIA GeForce RTX 4090", "fp8", 660.6 / 2 * T),  # FP8 w/ FP32 accumulate 330.3/660.6*
        ("NVIDIA GeForce RTX 4080", "bf16", 194.9 / 2 * T),  # Ada WP: 97.5/194.9* (rounded)
        ("NVIDIA GeForce RTX 3090", "bf16", 142.4 / 2 * T),  # RTX Blackwell WP: 71.2/142.4*
        ("NVIDIA GeForce RTX 3090 Ti", "bf16", 320 / 4 * T),  # 320 AI TOPS (INT8 dense) / 4
    ],
)
def test_nvml_name_gives_the_dense_datasheet_peak(name, dtype, expected):
    peak = resolve_peak(name, dtype)
    assert peak is not None
    assert peak.source == "table"
    assert peak.dtype == dtype
    assert peak.flops == pytest.approx(expected, rel=1e-3)


def test_h100_sxm_bf16_is_dense_not_the_sparse_headline():
    peak = resolve_peak("NVIDIA H100 80GB HBM3", "bf16")
    assert peak.flops == 989.5e12
    assert peak.flops != 1979e12


# ------------------------------------------------------------------ no sparse-looking value


@pytest.mark.parametrize(
    ("name", "sparse_bf16"),
    [
        # datasheet headline BF16 (2:4 sparse, starred) for Hopper, Ampere and Blackwell parts
        ("NVIDIA H100 80GB HBM3", 1979),
        ("NVIDIA H100 PCIe", 1513),
        ("NVIDIA H100 NVL", 1671),
        ("NVIDIA H200", 1979),
        ("NVIDIA H200 NVL", 1671),
        ("NVIDIA GH200 480GB", 1979),
        ("NVIDIA H800", 1979),
        ("NVIDIA A100-SXM4-80GB", 624),
        ("NVIDIA A100-SXM4-40GB", 624),
        ("NVIDIA A100 80GB PCIe", 624),
        ("NVIDIA A100-PCIE-40GB", 624),
        ("NVIDIA A30", 330),
        ("NVIDIA A10", 250),
        ("NVIDIA B200", 4500),
        ("NVIDIA B100", 3500),
        ("NVIDIA GB200", 5000),
    ],
)
def test_hopper_ampere_blackwell_bf16_is_the_sparse_headline_halved(name, sparse_bf16):
    assert match_device(name).tflops["bf16"] == pytest.approx(sparse_bf16 / 2, rel=1e-9)


@pytest.mark.parametrize("row", rows(), ids=lambda r: r.label)
def test_no_row_mixes_a_sparse_figure_with_dense_ones(row):
    rate = row.tflops
    half = rate.get("bf16", rate.get("fp16"))
    if "bf16" in rate and "fp16" in rate:
        assert rate["fp16"] == rate["bf16"]
    if half is not None and "fp8" in rate:
        assert rate["fp8"] / half == pytest.approx(2, rel=0.03)  # FP8 is twice BF16, dense
    if half is not None and "tf32" in rate:
        assert rate["tf32"] / half == pytest.approx(0.5, rel=0.03)  # TF32 is half BF16, dense
    if half is not None and "fp32" in rate:
        # dense tensor over vector FP32 is at most 16 (A100: 312 / 19.5); a sparse figure
        # would be twice that
        assert half / rate["fp32"] <= 16.1


@pytest.mark.parametrize("row", [r for r in rows() if r.kind == "geforce"], ids=lambda r: r.label)
def test_geforce_bf16_is_the_tensor_fp32_accumulate_rate_not_the_vector_rate(row):
    # Ampere/Ada/Blackwell GeForce: tensor BF16 with FP32 accumulate is exactly twice the
    # vector FP32 rate. The FP16-accumulate rate would be 4x, the vector BF16 rate 1x.
    assert row.tflops["bf16"] / row.tflops["fp32"] == pytest.approx(2, rel=0.01)
    assert "FP32 accumulate" in row.citation or "FP32 Accumulate" in row.citation


# ------------------------------------------------------------------ dtypes with no rate


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("NVIDIA A10G", "bf16"),  # unknown device
        ("NVIDIA H20", "bf16"),
        ("Some Future GPU", "bf16"),
        ("cpu", "fp32"),
        (None, "bf16"),
        ("NVIDIA A100-SXM4-80GB", "fp8"),  # Ampere has no FP8 rate
        ("NVIDIA A10", "fp8"),
        ("NVIDIA RTX A6000", "fp8"),
        ("NVIDIA GeForce RTX 3090", "fp8"),
        ("Tesla T4", "bf16"),  # Turing has no BF16 rate
        ("Tesla T4", "tf32"),
        ("Tesla V100-SXM2-16GB", "bf16"),  # Volta has no BF16 nor TF32 rate
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


# ------------------------------------------------------------------ declared peaks


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


# ------------------------------------------------------------------ the table itself


def test_every_row_is_cited_and_well_formed():
    table_rows = rows()
    assert isinstance(table_rows, tuple) and len(table_rows) >= 40
    labels = [row.label for row in table_rows]
    assert len(labels) == len(set(labels))
    for row in table_rows:
        re.compile(row.pattern)
        assert row.names, row.label
        assert row.kind in KINDS and row.vendor in VENDORS, row.label
        assert row.citation.startswith(("http", "NVIDIA", "AMD", "Read in")), row.label
        assert isinstance(row.verified, bool)
        assert set(row.tflops) <= set(DTYPES) and row.tflops, row.label
        assert all(v > 0 for v in row.tflops.values())
        assert row.mem_bw >= 100e9, row.label  # bytes/s: every part here has >= 100 GB/s
        assert row.tdp_w > 0


def test_unverified_rows_say_why_in_their_citation():
    for row in rows():
        if not row.verified:
            assert "not readable" in row.citation or "not read" in row.citation, row.label


def test_verified_rows_name_the_vendor_document_they_were_read_in():
    verified = [row for row in rows() if row.verified]
    # the B300 (NVIDIA's Exemplar README) and the MI300X (AMD's ROCm documentation)
    assert {row.label for row in verified} == {"B300 (HGX/DGX)", "MI300X"}
    for row in verified:
        vendor = {"nvidia": "NVIDIA", "amd": "AMD"}[row.vendor]
        assert f"Read in {vendor}" in row.citation, row.label
        assert "https://" in row.citation, row.label


def test_rows_are_grouped_by_kind_in_a_stable_order():
    kinds = [row.kind for row in rows()]
    assert kinds == sorted(kinds, key=KINDS.index)
    datacenter = [row.vendor for row in rows() if row.kind == "datacenter"]
    assert datacenter == sorted(datacenter, key=VENDORS.index)  # AMD Instinct rows close it
    assert rows() == rows()
    assert [row.label for row in rows()][:2] == ["GB300 (per GPU)", "GB200 (per GPU)"]


def test_table_lists_every_row_with_all_a_printer_needs():
    listing = table()
    assert listing == table()  # stable
    assert [entry["label"] for entry in listing] == [row.label for row in rows()]
    for entry, row in zip(listing, rows(), strict=True):
        assert set(entry) == {
            "label",
            "kind",
            "vendor",
            "names",
            "pattern",
            "tflops",
            "mem_bw",
            "tdp_w",
            "verified",
            "citation",
        }
        assert list(entry["tflops"]) == list(DTYPES)  # every dtype, in DTYPES order
        for dtype in DTYPES:
            assert entry["tflops"][dtype] == row.tflops.get(dtype)
        assert entry["names"] == list(row.names)
        assert (entry["mem_bw"], entry["tdp_w"], entry["verified"]) == (
            row.mem_bw,
            row.tdp_w,
            row.verified,
        )
    t4 = next(entry for entry in listing if entry["label"] == "T4")
    assert t4["tflops"]["bf16"] is None and t4["tflops"]["fp16"] == 65


@pytest.mark.parametrize(
    ("name", "bytes_per_s", "watts"),
    [
        ("NVIDIA H100 80GB HBM3", 3.35e12, 700),  # 3.35 TB/s, up to 700 W
        ("NVIDIA H200", 4.8e12, 700),  # 4.8 TB/s
        ("NVIDIA GH200 480GB", 4.0e12, 1000),  # 96 GB HBM3 at 4 TB/s, superchip up to 1000 W
        ("NVIDIA GH200 144G HBM3e", 4.9e12, 1000),  # 144 GB HBM3e at 4.9 TB/s
        ("NVIDIA B300 SXM6 AC", 7.7e12, 1100),  # Exemplar README: DGX B300
        ("NVIDIA A100-SXM4-40GB", 1555e9, 400),  # 1,555 GB/s
        ("NVIDIA A100-SXM4-80GB", 2039e9, 400),  # 2,039 GB/s
        ("NVIDIA A100 80GB PCIe", 1935e9, 300),  # 1,935 GB/s
        ("NVIDIA L40S", 864e9, 350),
        ("NVIDIA L4", 300e9, 72),
        ("Tesla T4", 320e9, 70),
        ("NVIDIA GeForce RTX 5090", 1792e9, 575),
        ("NVIDIA A16", 200e9, 62.5),  # per GPU: a quarter of the 250 W board
    ],
)
def test_rows_carry_memory_bandwidth_in_bytes_per_second_and_board_power(name, bytes_per_s, watts):
    row = match_device(name)
    assert row.mem_bw == pytest.approx(bytes_per_s)
    assert row.tdp_w == watts


# ------------------------------------------------------------------ AMD Instinct rows


# Each figure pinned by hand from the AMD document its row cites:
# - MI300X: AMD's ROCm documentation "AMD Instinct MI300 series microarchitecture"
#   (docs/conceptual/gpu-arch/mi300.md), table "Peak-performance capabilities of the MI300X":
#   Matrix FP16/BF16 1307.4, Matrix FP8 2614.9, TF32 653.7, Matrix/Vector FP32 163.4 TFLOPS, no
#   sparsity; 5.3 TB/s; 750 W from AMD's MLPerf v4.1 system ("MI300X-...-192GB-750W").
# - MI325X: the MI300X's 304 CUs (ROCm gpu-arch-specs) at the same rates; 6 TB/s, 1,000 W.
# - MI350X / MI355X: 256 CUs (ROCm GPU specifications) x 4096 BF16 or 8192 FP8 FLOP per clock
#   per CU x 2.2 / 2.4 GHz: 256 x 4096 x 2.2e9 = 2306.87e12, x 8192 = 4613.73e12, FP32
#   256 x 256 x 2.2e9 = 144.18e12; 256 x 4096 x 2.4e9 = 2516.58e12, x 8192 = 5033.16e12,
#   256 x 256 x 2.4e9 = 157.29e12. AMD's MI355X page (as quoted in stas00/ml-engineering)
#   prints 2.5 PFLOPs BF16 dense, twice that "with structured sparsity"; 8 TB/s; 1,000 W
#   (MI350X) and 1,400 W (MI355X) as AMD presented them at ISC 2025.
AMD_ROWS = {
    # label: (bf16, fp16, tf32, fp8, fp32 TFLOP/s, GB/s, W)
    "MI300X": (1307.4, 1307.4, 653.7, 2614.9, 163.4, 5300, 750),
    "MI325X": (1307.4, 1307.4, 653.7, 2614.9, 163.4, 6000, 1000),
    "MI350X": (2306.9, 2306.9, None, 4613.7, 144.2, 8000, 1000),
    "MI355X": (2516.6, 2516.6, None, 5033.2, 157.3, 8000, 1400),
}


@pytest.mark.parametrize(("label", "figures"), AMD_ROWS.items(), ids=list(AMD_ROWS))
def test_amd_instinct_rows_carry_the_dense_datasheet_figures(label, figures):
    row = find_gpu(label)
    assert (row.label, row.vendor, row.kind) == (label, "amd", "datacenter")
    *tflops, gbps, watts = figures
    assert [row.tflops.get(d) for d in ("bf16", "fp16", "tf32", "fp8", "fp32")] == tflops
    assert row.mem_bw == pytest.approx(gbps * 1e9) and row.tdp_w == watts


@pytest.mark.parametrize(
    ("label", "cus", "ghz", "bf16_per_cu", "fp8_per_cu"),
    [
        ("MI300X", 304, 2.1, 2048, 4096),  # AMD's MI300X table: FLOPS/clock/CU
        ("MI350X", 256, 2.2, 4096, 8192),
        ("MI355X", 256, 2.4, 4096, 8192),
    ],
)
def test_amd_rows_are_cus_times_rate_per_cu_times_clock(label, cus, ghz, bf16_per_cu, fp8_per_cu):
    row = find_gpu(label)
    assert row.tflops["bf16"] == pytest.approx(cus * bf16_per_cu * ghz / 1e3, abs=0.05)
    assert row.tflops["fp8"] == pytest.approx(cus * fp8_per_cu * ghz / 1e3, abs=0.05)


def test_amd_bf16_is_the_sparse_headline_halved_not_the_headline():
    # MI355X: "with structured sparsity" FP16 5 PFLOPs and OCP-FP8 10.1 PFLOPs, exactly 2x dense
    mi355x = find_gpu("MI355X")
    assert mi355x.tflops["bf16"] == pytest.approx(5000 / 2, rel=0.01)
    assert mi355x.tflops["fp8"] == pytest.approx(10100 / 2, rel=0.01)
    # MI300X / MI325X: FP8 5,229.8 with sparsity (a secondary copy of AMD's table) / 2
    assert find_gpu("MI325X").tflops["fp8"] == pytest.approx(5229.8 / 2, abs=0.05)


def test_the_rocm_name_torch_reports_resolves_and_gives_an_mfu_peak():
    # torch on ROCm: _CudaDeviceProperties(name='AMD Instinct MI300X', ...)
    peak = resolve_peak("AMD Instinct MI300X", "bf16")
    assert (peak.flops, peak.device, peak.verified) == (1307.4e12, "MI300X", True)
    assert resolve_peak("AMD Instinct MI355X", "fp8").flops == pytest.approx(5033.2e12)
    assert resolve_peak("AMD Instinct MI355X", "tf32") is None  # CDNA4: no TF32 matrix rate


def test_every_name_starts_with_its_vendors_word_so_nvml_never_reaches_amd():
    for row in rows():
        words = ("NVIDIA ", "Tesla ") if row.vendor == "nvidia" else ("AMD ",)
        assert all(name.startswith(words) for name in row.names), row.label
    # NVML can only report NVIDIA names: a made-up "NVIDIA MI300X" is no AMD row, nor the reverse
    assert match_device("NVIDIA MI300X") is None and resolve_peak("NVIDIA MI300X", "bf16") is None
    assert match_device("AMD Instinct H100 80GB HBM3") is None


def test_a_row_whose_name_lacks_its_vendors_word_is_refused():
    from trainmeter.core.peaks import _row

    with pytest.raises(ValueError, match="names must start with"):
        _row("X", ["MI300X"], kind="datacenter", vendor="amd", gbps=1, tdp=1, cite="AMD", bf16=1)
    with pytest.raises(ValueError, match="names must start with"):
        _row("X", ["AMD Instinct MI300X"], kind="datacenter", gbps=1, tdp=1, cite="x", bf16=1)
