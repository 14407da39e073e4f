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
def test_agent_imports_only_stdlib_core_records_catalog_hfconfig_envnames_and_itself(path):
    # records (the wire schema), catalog (series names to roles), hfconfig (config field
    # names) and envnames (the environment variables tm sets): all pure, stdlib only,
    # importing nothing else of ours
    allowed = ("trainmeter.agent", "trainmeter.core.records", "trainmeter.core.catalog",
               "trainmeter.core.hfconfig", "trainmeter.core.envnames")  # fmt: skip
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


def _constants(path: Path):
    """Every string constant in a file's code (docstrings included)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def test_environment_variable_names_are_spelled_only_in_core_envnames():
    """The supervisor sets what the agent reads: one spelling of each name, in core/envnames.py.
    The injected sitecustomize spells the socket's out (it imports nothing of ours unless the
    variable is set), so it is held to the same spelling here."""
    from trainmeter.core import envnames

    named = {v for k, v in vars(envnames).items() if k.isupper()}
    for path in PKG.rglob("*.py"):
        if path.name == "envnames.py":
            continue
        spelled = {c for c in _constants(path) if c.startswith("TRAINMETER_") and c.isupper()}
        if path.name == "sitecustomize.py":
            assert spelled == {envnames.SOCKET}, f"{path}: {spelled}"
            continue
        assert spelled == set(), f"{path} spells {sorted(spelled)}: use core/envnames.py"
    assert len(named) == len(vars(envnames)["__all__"])  # every name exported, none twice


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
    """The no-CUDA-context invariant: sampling (NVML or a fake), and ``tm doctor`` looking at
    torch's version and at the GPUs, never import a CUDA binding, so the supervisor never makes a
    CUDA context."""
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


# -- the layer table --------------------------------------------------------------------------
# Which package of ours each may import (besides itself): docs/architecture.md "Layers". Every
# import counts: at module level or inside a function (a lazy import is still a dependency),
# absolute or relative, `import a.b` or `from a import b`.
LAYERS = {
    "_version": set(),
    "core": set(),
    "agent": {"core"},
    "sources": {"core"},
    "supervisor": {"core", "sources", "_version"},
    "exports": {"core", "supervisor", "_version"},
    "doctor": {"core", "sources", "_version"},
    "web": {"core", "sources", "exports", "supervisor", "_version"},
    "jupyter": {"core", "agent", "sources", "exports", "supervisor", "web", "_version"},
    "commands": {
        "core",
        "agent",
        "sources",
        "exports",
        "supervisor",
        "web",
        "jupyter",
        "doctor",
        "_version",
    },
    "cli": {
        "core",
        "sources",
        "exports",
        "supervisor",
        "web",
        "jupyter",
        "commands",
        "doctor",
        "_version",
        "__init__",
    },
    # the public facade: trainmeter.emit, and IPython's %load_ext entry points
    "__init__": {"_version", "agent", "jupyter"},
}
# Imports that run up a layer, each named (the test fails on any other, and on one of these
# once it is gone, so that the list only shrinks): none left.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = path.with_suffix("").relative_to(PKG.parent).parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _our_imports(path: Path) -> set[str]:
    """Every module of ours a file imports, anywhere in it (relative imports resolved;
    ``from a import b`` counts ``a`` and, when it is a module, ``a.b``)."""
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.split(".")[0] == "trainmeter"}


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PKG.rglob("*.py")}
    return {n: {m for m in _our_imports(p) if m in files and m != n} for n, p in files.items()}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_import_of_ours_follows_the_layer_table():
    graph = _graph()
    assert set(LAYERS) >= {_package(n) for n in graph}, "a package the table does not name"
    upward = set()
    for mod, deps in graph.items():
        for dep in deps:
            a, b = _package(mod), _package(dep)
            if a != b and b not in LAYERS[a]:
                upward.add((mod, dep))
    assert upward - KNOWN_UPWARD == set(), "imports up a layer"
    assert KNOWN_UPWARD - upward == set(), "gone: take them off KNOWN_UPWARD"


def test_no_import_cycle_among_our_modules():
    """Tarjan's strongly connected components over every import of ours: none larger than one
    module (a cycle is two modules that cannot be understood, or loaded, apart)."""
    graph, index, low, stack, on, cycles = _graph(), {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_layer_reader_sees_lazy_relative_and_from_imports(tmp_path, monkeypatch):
    """The reader itself can fail: a lazy import inside a function, a relative one and a
    `from package import module` are all found (a test that read only the module's top level
    missed the jupyter cycle, both sides of which imported inside functions)."""
    pkg = tmp_path / "trainmeter"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "core" / "b.py").write_text("from trainmeter import web\n")
    (pkg / "web.py").write_text("import trainmeter.core.a\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    graph = _graph()
    assert graph["trainmeter.core.a"] == {"trainmeter.core", "trainmeter.core.b"}
    assert graph["trainmeter.core.b"] == {"trainmeter", "trainmeter.web"}
    assert graph["trainmeter.web"] == {"trainmeter.core.a"}
