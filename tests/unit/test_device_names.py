"""A GPU name as people type it (trainmeter/core/peaks.py ``find_gpu``), one rule for
``--device`` (``tm`` and ``%%trainmeter``), ``tm plan --gpu``, ``tm peaks NAME`` and the engine.

Expected rows are the table's labels written out by hand for each form; the name forms are the
ones docs/spec.md "Peaks" lists.
"""

from __future__ import annotations

import pytest

from trainmeter.core import peaks, records
from trainmeter.core.engine import Engine

# ------------------------------------------------------------------ every accepted form

FORMS = [
    # an NVML name, exactly as the driver reports it, and in other case and spacing
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("nvidia  h100 80gb hbm3", "H100 SXM"),
    # the row label, any case, any punctuation
    ("H100 SXM", "H100 SXM"),
    ("h100 sxm", "H100 SXM"),
    ("H100-SXM", "H100 SXM"),
    ("h100_sxm", "H100 SXM"),
    ("h100-sxm", "H100 SXM"),
    ("A100 80GB PCIe", "A100 80GB PCIe"),
    ("a100-80gb-pcie", "A100 80GB PCIe"),
    # the label without its parenthesised part, where no other row shares it
    ("b200", "B200 (HGX)"),
    ("GB200", "GB200 (per GPU)"),
    ("B300", "B300 (HGX/DGX)"),
    ("a16", "A16 (one of four GPUs)"),
    # a GeForce label without "GeForce"
    ("rtx-4090", "GeForce RTX 4090"),
    ("RTX 3090 Ti", "GeForce RTX 3090 Ti"),
    # an NVML name without its vendor's word, or with its punctuation changed
    ("A100-SXM4-80GB", "A100 80GB SXM"),
    ("nvidia a100 sxm4 80gb", "A100 80GB SXM"),
    ("h100 80gb hbm3", "H100 SXM"),
    ("h200", "H200 SXM"),  # NVML "NVIDIA H200" is the SXM board
    ("h800", "H800 SXM"),
    ("l40s", "L40S"),
    ("V100-SXM2-32GB", "V100 SXM2"),  # NVML "Tesla V100-SXM2-32GB"
    ("t4", "T4"),
    # the vendor's word in front of a short name
    ("NVIDIA H100 SXM", "H100 SXM"),
    ("nvidia-l40s", "L40S"),
    # aliases
    ("a100-80gb", "A100 80GB SXM"),
    ("a800-80gb", "A800 80GB SXM"),
    ("gh200-96gb", "GH200 (96 GB HBM3)"),
    ("GH200 144GB", "GH200 (144 GB HBM3e)"),
    # AMD Instinct: the label, the name torch reports on ROCm, with or without AMD's words
    ("MI300X", "MI300X"),
    ("mi300x", "MI300X"),
    ("AMD Instinct MI300X", "MI300X"),
    ("amd-instinct-mi300x", "MI300X"),
    ("AMD MI300X", "MI300X"),
    ("Instinct MI325X", "MI325X"),
    ("mi325x", "MI325X"),
    ("MI350X", "MI350X"),
    ("mi355x", "MI355X"),
    ("AMD Instinct MI355X", "MI355X"),
]


@pytest.mark.parametrize(("name", "label"), FORMS, ids=[n for n, _ in FORMS])
def test_every_accepted_form_finds_its_row(name, label):
    assert peaks.find_gpu(name).label == label
    row, why = peaks.match_gpu(name)
    assert row.label == label and repr(name) in why and label in why


@pytest.mark.parametrize("row", peaks.rows(), ids=lambda r: r.label)
def test_every_row_is_found_by_its_label_and_each_listed_name(row):
    assert peaks.find_gpu(row.label) is row
    assert peaks.find_gpu(row.label.lower().replace(" ", "-")) is row
    for name in row.names:
        assert peaks.find_gpu(name) is row
        assert peaks.find_gpu(name.upper().replace(" ", "_")) is row  # punctuation ignored


UNKNOWN = [
    "h100",  # SXM, PCIe or NVL?
    "NVIDIA H100",  # PCI id 2339, no form factor: no row
    "gh200",  # two rows, 96 GB and 144 GB
    "a100",
    "mi300",  # not a row; MI300A is not in the table either
    "NVIDIA A10G",  # not the A10
    "a10g",
    "NVIDIA GeForce RTX 4090 D",
    "NVIDIA A100-SXM4-40GB MIG 1g.5gb",  # a MIG slice is not its GPU
    "NVIDIA MI300X",  # an NVIDIA word never reaches an AMD row
    "AMD H100 SXM",  # nor an AMD word an NVIDIA row
    "Instinct T4",
    "h100-sxmm",
    "cpu",
    "",
    "---",
    None,
]


@pytest.mark.parametrize("name", UNKNOWN)
def test_unknown_ambiguous_and_cross_vendor_names_find_nothing(name):
    assert peaks.find_gpu(name) is None and peaks.match_gpu(name) is None


def test_a_name_two_rows_derive_names_neither():
    # "GH200 (96 GB HBM3)" and "GH200 (144 GB HBM3e)" both lose their parentheses to "gh200"
    assert "gh200" not in peaks.gpu_short_names()
    assert peaks.find_gpu("gh200") is None


@pytest.mark.parametrize("row", [r for r in peaks.rows() if r.vendor == "amd"], ids=str)
def test_no_nvidia_spelling_of_an_amd_name_finds_it_and_no_amd_spelling_an_nvidia_one(row):
    assert peaks.find_gpu(f"NVIDIA {row.label}") is None
    assert peaks.find_gpu(f"AMD {row.label}") is row
    nvidia = [r for r in peaks.rows() if r.vendor == "nvidia"]
    for other in nvidia:
        assert peaks.find_gpu(f"AMD {other.label}") is None
        assert peaks.find_gpu(f"AMD Instinct {other.names[0]}") is None


# ------------------------------------------------------------------ typos: close names


@pytest.mark.parametrize(
    ("typo", "close"),
    [
        ("h100", ["h100-nvl", "h100-pcie", "h100-sxm"]),  # every variant that extends it
        ("h100-sxmm", ["h100-sxm"]),  # look-alikes, closest first
        ("mi300", ["mi300x"]),
        ("NVIDIA MI300X", ["mi300x"]),  # the vendor word dropped for the hint only
        ("mi355", ["mi355x"]),
    ],
)
def test_a_typo_names_the_close_short_names(typo, close):
    assert peaks.close_gpu_names(typo)[: len(close)] == close
    message = peaks.unknown_gpu(typo)
    assert message.startswith(f"unknown GPU {typo!r} (did you mean {close[0]}")
    assert "--peak" in message and "tm peaks" in message
    with pytest.raises(peaks.UnknownGPUError, match=r"did you mean"):
        peaks.check_gpu(typo)


def test_check_gpu_lets_a_declared_peak_label_an_unknown_name():
    assert peaks.check_gpu("TPU v5e", 197e12) is None  # --peak 197T: the name only labels it
    assert peaks.check_gpu("h100-sxm", 1e12).label == "H100 SXM"
    assert peaks.check_gpu(None) is None and peaks.check_gpu("") is None
    with pytest.raises(ValueError, match="unknown GPU 'TPU v5e': not in the peaks table"):
        peaks.check_gpu("TPU v5e")


# ------------------------------------------------------------------ the engine's peak


def _engine(opts: dict, model: dict) -> Engine:
    eng = Engine()
    start = {"id": "r", "name": "n", "argv": [], "version": "0", "opts": opts}
    eng.apply(records.make("run_start", 100.0, **start))
    eng.apply(records.make("agent_hello", 100.5, pid=1, rank=0, world_size=1))
    eng.apply(records.make("model", 100.6, **model))
    return eng


_MODEL = {"params": 1000, "embedding_params": 100, "token_embedding_params": 100, "layers": 2,
          "width": 8, "heads": 2, "seq_len": 4, "vocab": 50}  # fmt: skip


@pytest.mark.parametrize(
    ("device", "dtype", "label", "flops"),
    [
        ("H100 SXM", "bf16", "H100 SXM", 989.5e12),  # 1,979 TFLOPS* / 2
        ("h100-sxm", "bf16", "H100 SXM", 989.5e12),
        ("NVIDIA H100 80GB HBM3", "fp8", "H100 SXM", 1979e12),  # 3,958* / 2
        ("a100-80gb", "bf16", "A100 80GB SXM", 312e12),  # 624* / 2
        ("mi300x", "bf16", "MI300X", 1307.4e12),  # AMD's MI300X table
        ("MI355X", "fp8", "MI355X", 5033.2e12),  # 256 CUs x 8192 x 2.4 GHz
    ],
)
def test_the_engine_gives_a_table_peak_for_a_typed_device(device, dtype, label, flops):
    snap = _engine({"device": device, "dtype": dtype}, {**_MODEL, "device": "cpu"}).snapshot()
    peak = snap["peak"]
    assert (peak["device"], peak["source"], peak["dtype"]) == (label, "table", dtype)
    assert peak["flops"] == pytest.approx(flops)


def test_the_engine_reads_the_model_dtype_for_a_typed_device_on_cuda():
    model = {**_MODEL, "device": "cuda", "device_name": "NVIDIA A10G", "run_dtype": "bf16",
             "gpus": 1}  # fmt: skip
    # --device wins over the model's own (unknown) device name
    snap = _engine({"device": "H100 SXM"}, model).snapshot()
    assert snap["peak"]["flops"] == pytest.approx(989.5e12) and snap["gpus"] == 1
    # no --device: the A10G is not in the table, so no peak
    assert _engine({}, model).snapshot()["peak"] is None


def test_the_engine_finds_an_amd_gpu_by_the_name_torch_reports_on_rocm():
    model = {**_MODEL, "device": "cuda", "device_name": "AMD Instinct MI300X",
             "run_dtype": "bf16", "gpus": 1}  # fmt: skip
    peak = _engine({}, model).snapshot()["peak"]
    assert (peak["device"], peak["flops"]) == ("MI300X", 1307.4e12)


# ------------------------------------------------------------------ %%trainmeter --device


def test_the_magic_refuses_an_unknown_device_with_close_names():
    pytest.importorskip("IPython")
    from IPython.core.error import UsageError
    from IPython.core.magic_arguments import parse_argstring

    from trainmeter.jupyter.magics import TrainmeterMagics, _opts

    magic = TrainmeterMagics.trainmeter
    assert _opts(parse_argstring(magic, '--device "H100 SXM"'))["device"] == "H100 SXM"
    assert _opts(parse_argstring(magic, "--device mi300x"))["device"] == "mi300x"
    with pytest.raises(UsageError, match=r"--device: unknown GPU 'h100-sxmm' \(did you mean "
                                         r"h100-sxm"):  # fmt: skip
        _opts(parse_argstring(magic, "--device h100-sxmm"))
    declared = _opts(parse_argstring(magic, "--device tpu-v5e --peak 197T"))
    assert (declared["device"], declared["peak_flops"]) == ("tpu-v5e", 197e12)
