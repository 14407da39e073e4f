"""Layers you can see: the core and the agent load only the standard library (they run inside
every training process), the supervisor never loads a CUDA binding, and only
trainmeter/sources/gpu may touch NVML (docs/architecture.md "Layers")."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "trainmeter"
STDLIB = set(sys.stdlib_module_names)
# agent files that import torch inside functions, after the user's code imported it
LAZY_TORCH = ("torch_taps.py", "spans.py", "flop_count.py", "step_clock.py")


def _imports(path: Path):
    """(module, at_module_level) for every import in a file."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, id(node) in top


def _files(sub: str):
    return sorted((PKG / sub).rglob("*.py"))


@pytest.mark.parametrize("path", _files("core"), ids=lambda p: p.name)
def test_core_imports_only_the_standard_library_and_itself(path):
    for mod, _ in _imports(path):
        root = mod.split(".")[0]
        assert root in STDLIB or mod.startswith("trainmeter.core"), f"{path.name} imports {mod}"


@pytest.mark.parametrize("path", _files("agent"), ids=lambda p: p.name)
def test_agent_imports_only_stdlib_core_records_catalog_hfconfig_and_itself(path):
    # records (the wire schema), catalog (series names to roles) and hfconfig (config field
    # names): all pure, stdlib only, importing nothing else of ours
    allowed = ("trainmeter.agent", "trainmeter.core.records", "trainmeter.core.catalog",
               "trainmeter.core.hfconfig")  # fmt: skip
    for mod, top in _imports(path):
        root = mod.split(".")[0]
        ok = root in STDLIB or mod.startswith(allowed)
        # torch submodules only inside functions that run after the user imported torch
        lazy_torch = root == "torch" and not top and path.name in LAZY_TORCH
        assert ok or lazy_torch, f"{path.name} imports {mod}"


@pytest.mark.parametrize("path", _files("sources"), ids=lambda p: p.name)
def test_sources_import_only_the_core_and_themselves_of_ours(path):
    for mod, _ in _imports(path):
        if mod.split(".")[0] == "trainmeter":
            assert mod.startswith(("trainmeter.core", "trainmeter.sources")), f"{path.name}: {mod}"


def test_only_sources_gpu_touches_nvml():
    for path in PKG.rglob("*.py"):
        if "sources" in path.parts and path.name.startswith("gpu"):
            continue
        mods = {m.split(".")[0] for m, _ in _imports(path)}
        assert "pynvml" not in mods, f"{path} imports pynvml"


def _modules_after(code: str) -> set[str]:
    code += "\nimport sys; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_importing_trainmeter_loads_no_third_party_module():
    loaded = _modules_after("import trainmeter") - _modules_after("pass")  # minus .pth imports
    third = {m.split(".")[0] for m in loaded} - STDLIB - {"trainmeter"}
    assert third == set(), f"import trainmeter loaded {sorted(third)}"


CUDA = {"torch", "cupy", "pycuda", "cuda", "jax", "tensorflow", "numba"}


def test_supervisor_and_cli_load_no_cuda_binding():
    loaded = _modules_after(
        "import trainmeter.cli, trainmeter.supervisor.launcher, trainmeter.supervisor.__main__"
    )
    assert not CUDA & {m.split(".")[0] for m in loaded}


def test_the_sampler_sources_and_doctor_at_work_load_no_cuda_binding(tmp_path):
    """Invariant 9: sampling (NVML or a fake), and ``tm doctor`` looking at torch's version and
    at the GPUs, never import a CUDA binding, so the supervisor never makes a CUDA context."""
    code = f"""
import contextlib, io
import trainmeter.sources, trainmeter.sources.gpu, trainmeter.sources.fake
import trainmeter.sources.host, trainmeter.supervisor.sampler, trainmeter.doctor
from trainmeter.cli import main
from trainmeter.supervisor.live import Live
from trainmeter.supervisor.sampler import start_sampler
live = Live({str(tmp_path)!r})
live.open_run("t", ["x"], {{}})
for spec in (None, "fake:h100x2", "fake:a100", "fake:mig", "fake:lost"):
    sampler = start_sampler(live, spec, 10.0, lambda: [1])
    sampler.tick()
    sampler.stop()
live.close_run("ok")
with contextlib.redirect_stdout(io.StringIO()):
    for spec in ([], ["--gpu-backend", "fake:h100x2"], ["--gpu-backend", "nvml"]):
        assert main(["doctor", "--json", *spec]) == 0
    assert main(["peaks"]) == 0
"""
    loaded = _modules_after(code)
    assert {"trainmeter.doctor", "trainmeter.supervisor.sampler"} <= loaded
    assert not CUDA & {m.split(".")[0] for m in loaded}
