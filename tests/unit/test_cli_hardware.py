"""``tm peaks`` and ``tm doctor`` (trainmeter/commands/peaks.py, commands/doctor.py and the
report in trainmeter/doctor.py), run in-process against the peaks table and fake GPU backends,
and once on this machine as it is; ``tm --device`` checked before the command runs."""

import importlib.metadata
import json
import sys

import pytest
from conftest import run_tm

from trainmeter import doctor
from trainmeter.cli import main
from trainmeter.core import peaks
from trainmeter.sources import SPEC_FORMS, NoneBackend, open_backend

UNKNOWN = "unknown: declare one with --peak"
ALL_NAMES = [(row.label, name) for row in peaks.rows() for name in row.names]


@pytest.fixture(autouse=True)
def _no_backend_from_the_environment(monkeypatch):
    monkeypatch.delenv("TRAINMETER_GPU_BACKEND", raising=False)


def _tm(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# --- tm peaks ----------------------------------------------------------------------------------


def test_peaks_prints_every_row_with_its_dense_figures_names_and_source(capsys):
    rc, out, _ = _tm(capsys, "peaks")
    assert rc == 0
    lines = out.splitlines()
    assert "dense" in lines[0].lower() and "sparse" not in lines[0].lower()
    assert lines[1].split() == ["device", "kind", "BF16", "FP16", "TF32", "FP8", "FP32", "GB/s",
                                "W", "verified"]  # fmt: skip
    rows = peaks.table()
    assert len(lines) == 2 + 2 * len(rows)  # a line of figures and one of names per row
    h100 = next(i for i, ln in enumerate(lines) if ln.startswith("H100 SXM "))
    # H100 SXM: BF16 989.5, FP16 989.5, TF32 494.5, FP8 1979, FP32 67 TFLOP/s; 3350 GB/s; 700 W
    assert lines[h100].split()[2:] == ["datacenter", "989.5", "989.5", "494.5", "1979", "67",
                                       "3350", "700", "no"]  # fmt: skip
    assert lines[h100 + 1].strip() == (
        'NVML "NVIDIA H100 80GB HBM3" · NVIDIA H100 Tensor Core GPU datasheet'
    )
    a100 = next(i for i, ln in enumerate(lines) if ln.startswith("A100 80GB SXM "))
    assert lines[a100].split()[7] == "-"  # no FP8 on an A100: no rate, never another card's
    for row in rows:
        assert any(ln.startswith(row["label"] + " ") for ln in lines), row["label"]
    # an AMD Instinct row: MI300X BF16/FP16 1307.4, TF32 653.7, FP8 2614.9, FP32 163.4 (AMD's
    # MI300X table), 5.3 TB/s, 750 W; its names are what torch reports on ROCm, not NVML names
    mi300x = next(i for i, ln in enumerate(lines) if ln.startswith("MI300X "))
    assert lines[mi300x].split()[1:] == ["datacenter", "1307.4", "1307.4", "653.7", "2614.9",
                                         "163.4", "5300", "750", "yes"]  # fmt: skip
    assert lines[mi300x + 1].strip().startswith('ROCm "AMD Instinct MI300X" · Read in AMD')


def test_peaks_json_is_the_table_with_short_citations(capsys):
    rc, out, _ = _tm(capsys, "peaks", "--json")
    data = json.loads(out)
    assert rc == 0 and len(data) == len(peaks.table())
    for got, row in zip(data, peaks.table(), strict=True):
        short = got.pop("citation_short")
        assert got == json.loads(json.dumps(row))
        assert short and row["citation"].startswith(short) and "http" not in short


@pytest.mark.parametrize("label, name", ALL_NAMES, ids=[n for _, n in ALL_NAMES])
def test_peaks_resolves_every_nvml_name_in_the_table(capsys, label, name):
    rc, out, _ = _tm(capsys, "peaks", name)
    assert rc == 0
    assert out.splitlines()[2].startswith(label + " ")
    source = "ROCm" if name.startswith("AMD ") else "NVML"
    assert f"why: {name!r} is the {source} name {name!r} listed for {label} (exact match" in out
    rc, out, _ = _tm(capsys, "peaks", name, "--json")
    got = json.loads(out)
    assert rc == 0 and got["match"]["label"] == label and name in got["match"]["names"]


def test_peaks_ignores_case_and_repeated_spaces_only(capsys):
    rc, out, _ = _tm(capsys, "peaks", "nvidia  h100 80gb   HBM3")
    assert rc == 0 and "listed for H100 SXM" in out and "'NVIDIA H100 80GB HBM3'" in out


LOOK_ALIKES = [
    "NVIDIA H100",  # PCI id 2339: no form factor, so no row
    "H100",
    "NVIDIA H100 80GB",
    "NVIDIA A10G",  # not the A10
    "NVIDIA GeForce RTX 4090 D",  # not the 4090
    "NVIDIA GeForce RTX 4090 Laptop GPU",
    "NVIDIA A100-SXM4-40GB MIG 1g.5gb",  # a MIG slice is not its GPU
    "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
    "NVIDIA RTX A1000",  # not an A100
    "NVIDIA H200 141GB",
    "cpu",
]


@pytest.mark.parametrize("name", LOOK_ALIKES)
def test_peaks_refuses_look_alikes_and_unknown_names(capsys, name):
    rc, out, err = _tm(capsys, "peaks", name)
    assert rc == 1 and out == ""
    assert UNKNOWN in err and repr(name) in err
    rc, out, _ = _tm(capsys, "peaks", name, "--json")
    assert rc == 1 and json.loads(out)["match"] is None


def test_peaks_names_close_names_without_using_them(capsys):
    rc, _, err = _tm(capsys, "peaks", "NVIDIA H100 PCI")
    assert rc == 1 and UNKNOWN in err and "close but not the same: h100-pcie" in err
    rc, out, _ = _tm(capsys, "peaks", "h100", "--json")
    assert rc == 1 and json.loads(out)["close"] == ["h100-nvl", "h100-pcie", "h100-sxm"]


@pytest.mark.parametrize(
    ("name", "label", "why"),
    [
        ("H100 SXM", "H100 SXM", "'H100 SXM' reads 'h100-sxm': the label of H100 SXM"),
        ("h100-sxm", "H100 SXM", "'h100-sxm' reads 'h100-sxm': the label of H100 SXM"),
        ("a100-80gb", "A100 80GB SXM", "'a100-80gb' reads 'a100-80gb': an alias of A100 80GB SXM"),
        ("mi300x", "MI300X", "'mi300x' reads 'mi300x': the label of MI300X"),
        ("AMD MI355X", "MI355X", "'AMD MI355X' reads 'mi355x': the label of MI355X"),
    ],
)
def test_peaks_finds_a_typed_name_as_device_and_plan_do(capsys, name, label, why):
    rc, out, _ = _tm(capsys, "peaks", name)
    assert rc == 0 and out.splitlines()[2].startswith(label + " ")
    assert f"why: {why} (case and punctuation ignored" in out


# --- tm doctor ---------------------------------------------------------------------------------


def _doctor(capsys, *argv):
    rc, out, err = _tm(capsys, "doctor", "--json", *argv)
    assert rc == 0, err
    return json.loads(out)


def test_doctor_through_two_fake_h100s(capsys):
    report = _doctor(capsys, "--gpu-backend", "fake:h100x2")
    nvml = report["nvml"]
    assert nvml["loaded"] and nvml["fake"] and nvml["backend"] == "fake:h100x2"
    assert (nvml["driver_version"], nvml["nvml_version"], nvml["cuda_driver_version"]) == (
        "550.54.15", "12.550.54.15", "12.4")  # fmt: skip
    assert nvml["version"] == importlib.metadata.version("nvidia-ml-py")
    assert [g["name"] for g in report["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    for g in report["gpus"]:
        assert g["peak"] == {"dtype": "bf16", "tflops": 989.5, "device": "H100 SXM",
                             "source": "table", "verified": False}  # fmt: skip
        assert g["gpm"] is True and g["gpm_reason"] is None
        assert g["mig"] == "off" and g["mig_instance"] is False
        assert g["power_limit_w"] == 700.0 and g["lost"] is None
    assert report["gaps"] == [
        "GPUs come from the fake:h100x2 fake backend: a demonstration, not this node; drop "
        "--gpu-backend to look at the real GPUs"
    ]
    assert report["trainmeter"] and report["python"]["executable"] == sys.executable
    assert set(report["trackers"]) == {"wandb", "tensorboard", "mlflow", "lightning",
                                       "transformers"}  # fmt: skip


def test_doctor_text_for_a_person(capsys):
    rc, out, _ = _tm(capsys, "doctor", "--gpu-backend", "fake:h100x2")
    assert rc == 0
    assert "NVML: nvidia-ml-py" in out and "driver 550.54.15 · NVML 12.550.54.15" in out
    assert "  GPU 1: NVIDIA H100 80GB HBM3" in out
    assert "peak (bf16): 989.5 TFLOP/s dense bf16, H100 SXM (exact NVML name" in out
    assert "GPM: yes · MIG: off · power limit 700 W · memory 79.6 GiB" in out
    assert "to do:\n  - GPUs come from the fake:h100x2 fake backend" in out


def test_doctor_through_an_ampere_says_gpm_needs_hopper(capsys):
    report = _doctor(capsys, "--gpu-backend", "fake:a100")
    (g,) = report["gpus"]
    assert g["peak"]["tflops"] == 312 and g["peak"]["device"] == "A100 80GB SXM"
    assert g["gpm"] is False and "needs Hopper" in g["gpm_reason"]
    (gap,) = [x for x in report["gaps"] if x.startswith("GPU 0")]
    assert "OFU and intensity are not measured" in gap and "needs Hopper" in gap


def test_doctor_through_a_mig_instance_has_no_peak(capsys):
    report = _doctor(capsys, "--gpu-backend", "fake:mig")
    (g,) = report["gpus"]
    assert g["mig_instance"] is True and g["mig"] == "on" and g["peak"] is None
    assert g["peak_text"].startswith(UNKNOWN) and "MIG instance" in g["peak_text"]
    assert g["power_limit_w"] is None and "MIG" in g["power_limit_reason"]
    assert any("declare one with --peak" in x for x in report["gaps"])


def test_doctor_without_an_nvml_library(capsys):
    report = _doctor(capsys, "--gpu-backend", "fake:nonvml")
    nvml = report["nvml"]
    assert not nvml["loaded"] and report["gpus"] == []
    assert nvml["reason"] == "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)"
    assert any(x.startswith("NVML did not load") and "install the NVIDIA driver" in x
               for x in report["gaps"])  # fmt: skip


def test_doctor_on_this_machine_exits_0_whatever_it_finds(capsys):
    rc, out, _ = _tm(capsys, "doctor")
    assert rc == 0 and out.startswith("trainmeter ") and "torch:" in out
    report = _doctor(capsys)
    probe = open_backend(None)
    probe.close()
    if isinstance(probe, NoneBackend):  # no NVIDIA driver here (the usual test machine)
        assert not report["nvml"]["loaded"] and report["gpus"] == []
        assert report["nvml"]["backend"] == "nvml" and not report["nvml"]["fake"]
        assert any(x.startswith("NVML did not load") for x in report["gaps"])
    else:
        assert report["nvml"]["loaded"] and report["nvml"]["driver_version"]
    torch = report["torch"]
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = None
    assert torch["version"] == version and torch["installed"] == (version is not None)


def test_doctor_says_what_to_do_about_each_missing_piece(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    monkeypatch.setattr(doctor, "_version", lambda *dists: None)  # nothing installed
    monkeypatch.setattr(doctor, "_findable", lambda module: False)
    monkeypatch.setattr(doctor, "STATIC", tmp_path)  # no front-end bundle
    report = _doctor(capsys)
    assert not report["nvml"]["installed"] and not report["torch"]["installed"]
    assert report["trackers"] == dict.fromkeys(doctor.TRACKERS)
    assert not report["frontend"]["bundle"]
    assert report["frontend"]["missing"] == ["widget.js", "widget.css", "page.js", "page.css"]
    gaps = report["gaps"]
    assert len(gaps) == 3
    assert gaps[0].startswith("nvidia-ml-py is not installed") and "trainmeter[gpu]" in gaps[0]
    assert gaps[1].startswith("torch is not installed")
    assert "npm run build" in gaps[2]


def test_doctor_refuses_a_bad_backend_naming_the_forms(capsys):
    rc, _, err = _tm(capsys, "doctor", "--gpu-backend", "fake:zz")
    assert rc == 2 and all(form in err for form in SPEC_FORMS)


def test_a_reader_leaving_the_pipe_early_gets_no_traceback():
    # `tm peaks | true`: the reader exits at once, so writing the table hits a closed pipe
    import subprocess
    import sys

    out = subprocess.run(f"'{sys.executable}' -m trainmeter.cli peaks | true", shell=True,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "Traceback" not in out.stderr and "BrokenPipeError" not in out.stderr, out.stderr


# --- tm --device -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["h100-sxmm", "h100", "NVIDIA MI300X"])
def test_an_unknown_device_is_refused_before_anything_runs(capsys, name):
    rc, out, err = _tm(capsys, "--device", name, "--no-web", "-q", "--", sys.executable, "-c",
                       "raise SystemExit(7)")  # fmt: skip
    assert rc == 2 and out == ""  # 7 would mean the command ran
    assert err.startswith(f"tm: --device: unknown GPU {name!r} (did you mean ")
    assert "--peak" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_typed_device_runs_and_a_typo_exits_2(tmp_path):
    ok = run_tm(["--device", "H100 SXM", "--no-web", "-q", "--", sys.executable, "-c", "pass"],
                tmp_path)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    typo = run_tm(["--device", "H100 SXMM", "--no-web", "-q", "--", sys.executable, "-c",
                   "pass"], tmp_path)  # fmt: skip
    assert typo.returncode == 2
    assert "--device: unknown GPU 'H100 SXMM' (did you mean h100-sxm" in typo.stderr
    # a declared peak may label a device the table does not know
    declared = run_tm(["--device", "TPU v5e", "--peak", "197T", "--no-web", "-q", "--",
                       sys.executable, "-c", "pass"], tmp_path)  # fmt: skip
    assert declared.returncode == 0, declared.stderr
