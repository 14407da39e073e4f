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
def test_agent_imports_only_stdlib_core_records_and_itself(path):
    for mod, top in _imports(path):
        root = mod.split(".")[0]
        ok = root in STDLIB or mod.startswith(("trainmeter.agent", "trainmeter.core.records"))
        # torch submodules only inside functions that run after the user imported torch
        lazy_torch = root == "torch" and not top and path.name == "torch_taps.py"
        assert ok or lazy_torch, f"{path.name} imports {mod}"


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


def test_supervisor_and_cli_load_no_cuda_binding():
    loaded = _modules_after(
        "import trainmeter.cli, trainmeter.supervisor.launcher, trainmeter.supervisor.__main__"
    )
    cuda = {"torch", "cupy", "pycuda", "cuda", "jax", "tensorflow", "numba"}
    assert not cuda & {m.split(".")[0] for m in loaded}
