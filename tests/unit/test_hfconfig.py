"""The Hugging Face config table (core/hfconfig.py) against transformers' own config classes.

Every key the table names for a model type must be an attribute its configuration class
stores (``to_dict()``, what ``config.json`` carries), and reading a default config must give
the values that class holds. transformers is a test dependency (pyproject ``test`` extra);
nothing is downloaded: configs are built from their classes.
"""

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
import transformers

from trainmeter.core import hfconfig


def _config(model_type: str, **kwargs):
    """A default config of ``model_type`` from transformers' registry (no download)."""
    return transformers.AutoConfig.for_model(model_type, **kwargs)


@pytest.mark.parametrize("model_type", sorted(hfconfig.FAMILIES))
def test_every_key_the_table_names_is_an_attribute_of_the_real_config_class(model_type):
    fam = hfconfig.FAMILIES[model_type]
    stored = _config(model_type).to_dict()  # the attributes a config.json of it holds
    assert stored["model_type"] == model_type
    names = [*fam.keys.values(), *([fam.act] if fam.act else []), *(fam.one_kv_head or ())]
    missing = [name for name in names if name not in stored]
    assert missing == [], f"{model_type}: not attributes of its config class: {missing}"
    assert set(fam.keys) <= set(hfconfig.FIELDS)


@pytest.mark.parametrize("model_type", sorted(hfconfig.FAMILIES))
def test_a_default_config_reads_as_the_values_its_class_holds(model_type):
    config = _config(model_type)
    fam = hfconfig.FAMILIES[model_type]
    r = hfconfig.read(config)
    assert r.family == model_type and r.bad == {}
    for name, key in fam.keys.items():
        value = getattr(config, key)
        if value is not None and not (name == "kv_heads" and fam.one_kv_head):
            assert r.values[name] == value, (name, key)
            assert r.source[name] == key
    # the same config as the JSON object save_pretrained writes reads the same
    assert hfconfig.read(config.to_dict()).values == r.values
    assert hfconfig.read(config.to_dict()).gated == r.gated


def test_gpt2_n_inner_null_means_four_times_n_embd():
    # GPT2Config: "n_inner (int, optional): Dimensionality of the inner feed-forward layers.
    # None will set it to 4 times n_embd" (configuration_gpt2.py); GPT2MLP(4 * hidden_size)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100,
                                     n_positions=64)  # fmt: skip
    assert config.n_inner is None
    r = hfconfig.read(config)
    assert r.values == {"layers": 2, "width": 32, "heads": 4, "ffn": 128, "vocab": 100,
                        "context": 64}  # fmt: skip
    assert r.source["ffn"] == "4 * n_embd (n_inner unset)" and r.gated is False
    assert hfconfig.read({"model_type": "gpt2", "n_embd": 32}).values["ffn"] == 128  # absent
    given = transformers.GPT2Config(n_embd=32, n_head=4, n_inner=100)
    assert hfconfig.read(given).values["ffn"] == 100  # an explicit n_inner wins


def test_gptj_and_falcon_nulls_and_falcons_multi_query_head():
    gptj = transformers.GPTJConfig(n_embd=64, n_head=4, n_layer=2)  # n_inner None: 4 * 64
    assert hfconfig.read(gptj).values["ffn"] == 256
    # FalconConfig: ffn_hidden_size None -> 4 * hidden_size; FalconAttention.num_kv_heads is
    # num_kv_heads if new_decoder_architecture or not multi_query, else 1 (modeling_falcon.py)
    mqa = transformers.FalconConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=2)
    r = hfconfig.read(mqa)
    assert r.values["ffn"] == 256 and r.values["kv_heads"] == 1
    new = transformers.FalconConfig(hidden_size=64, num_attention_heads=4, num_kv_heads=2,
                                    new_decoder_architecture=True)  # fmt: skip
    assert hfconfig.read(new).values["kv_heads"] == 2
    full = transformers.FalconConfig(hidden_size=64, num_attention_heads=4, multi_query=False)
    assert hfconfig.read(full).values["kv_heads"] == 4  # num_kv_heads None -> heads


@pytest.mark.parametrize(
    ("model_type", "kwargs", "gated"),
    [
        ("llama", {}, True),
        ("gemma", {}, True),  # GemmaMLP is gated; its activation is gelu_pytorch_tanh
        ("gemma2", {}, True),  # hidden_activation, not hidden_act
        ("phi3", {}, True),  # one fused gate_up_proj
        ("gpt2", {}, False),
        ("gpt_neox", {}, False),
        ("opt", {}, False),
        ("bert", {}, False),
        ("t5", {"feed_forward_proj": "gated-gelu"}, True),  # T5DenseGatedActDense
        ("t5", {"feed_forward_proj": "relu"}, False),  # T5DenseActDense
    ],
)
def test_gating_by_model_type_else_by_the_activation(model_type, kwargs, gated):
    assert hfconfig.read(_config(model_type, **kwargs)).gated is gated


def test_llama_family_fields_pinned_against_a_small_config():
    config = transformers.LlamaConfig(num_hidden_layers=3, hidden_size=64, num_attention_heads=8,
                                      num_key_value_heads=2, intermediate_size=160,
                                      vocab_size=300, max_position_embeddings=128)  # fmt: skip
    r = hfconfig.read(config)
    # head_dim: LlamaConfig sets it to hidden_size // num_attention_heads = 64 / 8 = 8
    assert r.values == {"layers": 3, "width": 64, "heads": 8, "kv_heads": 2, "head_dim": 8,
                        "ffn": 160, "vocab": 300, "context": 128}  # fmt: skip
    assert r.gated is True and r.source["gated"] == "model_type"


@dataclass
class GPTConfig:  # nanoGPT's model.py config, field for field
    block_size: int = 64
    vocab_size: int = 96
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True


def test_a_config_with_no_model_type_reads_the_generic_spellings():
    r = hfconfig.read(GPTConfig())
    assert r.family is None
    assert r.values == {"layers": 2, "width": 32, "heads": 4, "vocab": 96, "context": 64}
    assert r.gated is None  # nanoGPT's config names no activation: the modules will tell
    # an unknown Hugging Face type uses the generic spellings too
    r = hfconfig.read({"model_type": "my_llama", "hidden_size": 16, "hidden_act": "SwiGLU"})
    assert r.family is None and r.values == {"width": 16} and r.gated is True
    # an explicit n_inner null in a generic config is GPT-2's 4 * width
    assert hfconfig.read({"n_embd": 16, "n_inner": None}).values["ffn"] == 64
    assert "ffn" not in hfconfig.read({"n_embd": 16}).values  # absent: nothing guessed
    # a config naming no model type may be read as a family (tm plan's GPT-2 spelling)
    assert hfconfig.read({"n_embd": 16}, default_family="gpt2").values["ffn"] == 64


def test_malformed_values_are_reported_not_used_and_nothing_raises():
    r = hfconfig.read({"hidden_size": "4096", "num_hidden_layers": True, "vocab_size": 0,
                       "hidden_act": 3})  # fmt: skip
    assert r.values == {}
    assert r.bad == {"width": ("hidden_size", "4096"), "layers": ("num_hidden_layers", True),
                     "vocab": ("vocab_size", 0), "gated": ("hidden_act", 3)}  # fmt: skip

    class Raising:
        model_type = "llama"

        @property
        def hidden_size(self):
            raise RuntimeError("lazy config")

    r = hfconfig.read(Raising())
    assert r.values == {} and r.family == "llama" and r.gated is True
    assert hfconfig.read(None).values == {}


def test_spellings_name_the_keys_tried():
    assert hfconfig.spellings("ffn", "llama") == ("intermediate_size",)
    assert hfconfig.spellings("ffn", "gpt2") == ("n_inner",)
    assert hfconfig.spellings("context", "bloom") == ()  # ALiBi: no position table
    assert hfconfig.spellings("layers", None)[:2] == ("num_hidden_layers", "n_layer")
    assert hfconfig.spellings("act", "gemma2") == ("hidden_activation",)


@pytest.mark.parametrize(
    ("name", "gated"),
    [("silu", True), ("SwiGLU", True), (" geglu ", True), ("gated-gelu", True),
     ("gelu", False), ("gelu_new", False), ("relu", False)],
)  # fmt: skip
def test_gated_activation_names(name, gated):
    assert hfconfig.gated_activation(name) is gated


def test_the_module_imports_only_the_standard_library():
    # the agent imports it inside every training process (tests/unit/test_layers.py allows it
    # there), so it may bring nothing else of ours along, core included
    import sys

    tree = ast.parse(Path(hfconfig.__file__).read_text())
    mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert {m.split(".")[0] for m in mods} <= set(sys.stdlib_module_names) | {"__future__"}


# -- one table: the agent and tm plan spell no config name of their own -------------------------
_READERS = ("agent/describe.py", "core/presets.py")  # the two readers of a model's config
_LOOKUPS = (ast.Subscript, ast.Compare, ast.Call)


def _table_names() -> set[str]:
    """Every config key and activation name the table knows."""
    names = {"model_type", *hfconfig.GENERIC_ACTS, *hfconfig.GENERIC_NULL_FFN, *hfconfig.MOE_KEYS,
             *hfconfig.GATED_ACTS, *hfconfig.MODULE_HEADS,
             *(key for key, _ in hfconfig.FLAGS.values())}  # fmt: skip
    for fam in hfconfig.FAMILIES.values():
        names |= {*fam.keys.values(), *([fam.act] if fam.act else []), *(fam.one_kv_head or ())}
    for spelled in hfconfig.GENERIC.values():
        names |= set(spelled)
    return names


def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of a module's code (docstrings left out: they may cite names)."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)}  # fmt: skip
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docs]  # fmt: skip


def _config_lookups(tree: ast.AST) -> list[str]:
    """Keys given as literals to a lookup on something named like a config: ``config.get("k")``,
    ``config["k"]``, ``"k" in config``, ``getattr(config, "k")``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target, args = node.func.value, node.args[:1] if node.func.attr == "get" else []
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
            target, args = (node.args[0], node.args[1:2]) if node.args else (None, [])
        elif isinstance(node, ast.Subscript):
            target, args = node.value, [node.slice]
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            target, args = node.comparators[0], [node.left]
        else:
            continue
        text = ast.unparse(target).lower() if target is not None else ""
        if "config" in text and not text.startswith("hfconfig."):  # not the table itself
            found += [a.value for a in args if isinstance(a, ast.Constant)
                      and isinstance(a.value, str)]  # fmt: skip
    return found


@pytest.mark.parametrize("relpath", _READERS)
def test_the_agent_and_tm_plan_read_config_names_only_from_the_table(relpath):
    """``agent/describe.py`` (a live model's config) and ``core/presets.py`` (``tm plan``'s
    config.json) once kept names of their own and disagreed (one knew ``reglu`` as a gated
    activation, the other did not). Neither may spell a config key or activation name the
    table knows (trainmeter's own field names, such as ``head_dim``, aside), nor look a config
    up by a literal key: every name comes from ``core/hfconfig.py``."""
    path = Path(hfconfig.__file__).parents[1] / relpath
    tree = ast.parse(path.read_text())
    ours = {*hfconfig.FIELDS, *hfconfig.FLAGS}  # field names: trainmeter's own vocabulary
    spelled = sorted({n.value for n in _code_strings(tree)} & (_table_names() - ours))
    assert spelled == [], f"{relpath} spells config names of its own: {spelled}"
    assert _config_lookups(tree) == [], f"{relpath} looks a config up by a literal key"
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {f"{n.module}.{a.name}" for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module for a in n.names}  # fmt: skip
    assert "trainmeter.core.hfconfig" in imported  # it reads configs through the table


def test_the_checks_above_see_a_mapping_of_ones_own():
    """The check itself can fail: a reader's own spelling, and a literal lookup of a name the
    table does not know, are both found."""
    tree = ast.parse('"""Reads n_layer."""\nACTS = ("swiglu", "reglu")\n'
                     'def f(config):\n    return config.get("n_layerz") or cfg["x"]\n')  # fmt: skip
    assert {n.value for n in _code_strings(tree)} & _table_names() == {"swiglu", "reglu"}
    assert _config_lookups(tree) == ["n_layerz"]
