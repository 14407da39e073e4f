"""Hugging Face config names: which key of a model's config gives each shape field.

The one table of config field names in trainmeter. The agent (``agent/describe.py``, a live
model's ``config``: a ``transformers.PretrainedConfig`` or any object with attributes, such as
nanoGPT's ``GPTConfig``) and ``tm plan`` (``core/presets.py``, a ``config.json`` read as plain
JSON) both read configs through :func:`read`, so they agree on every name and default.

Fields (all counts, whole numbers > 0): ``layers`` (transformer blocks), ``width`` (d_model),
``heads`` (query heads), ``kv_heads`` (key/value heads; absent means ``heads``), ``head_dim``
(per-head size; absent means width / heads), ``ffn`` (MLP hidden size; for a gated MLP, one of
its two up projections), ``vocab`` (rows of the token table), ``context`` (the configured
maximum sequence length, tokens), and ``gated`` (a 3-matrix MLP: gate, up, down).

A config whose ``model_type`` is in :data:`FAMILIES` is read with that family's own keys (the
attributes its ``transformers`` configuration class stores; tests/unit/test_hfconfig.py checks
each name against the real class); any other config with the spellings of :data:`GENERIC`,
the first present and non-null key winning. Sources: huggingface/transformers
``src/transformers/models/<model_type>/configuration_<model_type>.py`` (field names and the
meaning of a null value) and ``modeling_<model_type>.py`` (the MLP: gated or plain; Falcon's
multi-query rule), transformers 5.24.

Standard library only; imports nothing of ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FIELDS = ("layers", "width", "heads", "kv_heads", "head_dim", "ffn", "vocab", "context")


@dataclass(frozen=True)
class Family:
    """How one ``model_type``'s configuration class names the shape.

    Attributes:
        keys: field (of :data:`FIELDS`) -> the config key that gives it; a field the family
            has no key for is left out (Bloom's context: ALiBi, no position table).
        act: the key naming the MLP activation, or None.
        gated: True or False when the family's MLP is gated or plain whatever the activation is
            called (Gemma's gated MLP uses a gelu); None when the activation decides (T5's
            ``feed_forward_proj`` "gated-gelu").
        ffn_default: when the ffn key is absent or null, ffn = ``ffn_default * width`` (GPT-2's
            ``n_inner: null`` means 4 * n_embd); None: no default.
        one_kv_head: (flag, unless) keys: key/value heads are 1 when ``flag`` is true and
            ``unless`` is not (Falcon's ``multi_query`` without ``new_decoder_architecture``).
    """

    keys: Mapping[str, str]
    act: str | None
    gated: bool | None
    ffn_default: int | None = None
    one_kv_head: tuple[str, str] | None = None


# The spellings most families share (LlamaConfig's).
_LLAMA = {
    "layers": "num_hidden_layers",
    "width": "hidden_size",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "ffn": "intermediate_size",
    "vocab": "vocab_size",
    "context": "max_position_embeddings",
}
_NO_HEAD_DIM = {k: v for k, v in _LLAMA.items() if k != "head_dim"}
_MHA = {k: v for k, v in _NO_HEAD_DIM.items() if k != "kv_heads"}  # no GQA field
_GPT2 = {
    "layers": "n_layer",
    "width": "n_embd",
    "heads": "n_head",
    "ffn": "n_inner",
    "vocab": "vocab_size",
    "context": "n_positions",
}
_T5 = {
    "layers": "num_layers",
    "width": "d_model",
    "heads": "num_heads",
    "head_dim": "d_kv",
    "ffn": "d_ff",
    "vocab": "vocab_size",
}

FAMILIES: dict[str, Family] = {
    # gated: <Name>MLP has gate_proj, up_proj, down_proj (Phi3: one fused gate_up_proj)
    "llama": Family(_LLAMA, "hidden_act", True),
    "mistral": Family(_LLAMA, "hidden_act", True),
    "qwen2": Family(_NO_HEAD_DIM, "hidden_act", True),
    "qwen3": Family(_LLAMA, "hidden_act", True),
    "gemma": Family(_LLAMA, "hidden_act", True),
    "gemma2": Family(_LLAMA, "hidden_activation", True),
    "olmo": Family(_NO_HEAD_DIM, "hidden_act", True),
    "olmo2": Family(_NO_HEAD_DIM, "hidden_act", True),
    "phi3": Family(_NO_HEAD_DIM, "hidden_act", True),
    # plain: two matrices (c_fc/c_proj, fc1/fc2, dense_h_to_4h/dense_4h_to_h, wi/wo)
    "gpt2": Family(_GPT2, "activation_function", False, ffn_default=4),
    "gptj": Family(_GPT2, "activation_function", False, ffn_default=4),
    "gpt_neox": Family(_MHA, "hidden_act", False),
    "phi": Family(_NO_HEAD_DIM, "hidden_act", False),
    "opt": Family({**_MHA, "ffn": "ffn_dim"}, "activation_function", False),
    "bert": Family(_MHA, "hidden_act", False),
    "bloom": Family(
        {"layers": "n_layer", "width": "hidden_size", "heads": "n_head", "vocab": "vocab_size"},
        None,
        False,
        ffn_default=4,  # BloomMLP: dense_h_to_4h is hidden -> 4 * hidden, no config key
    ),
    "falcon": Family(
        {**_MHA, "kv_heads": "num_kv_heads", "ffn": "ffn_hidden_size"},
        "activation",
        False,
        ffn_default=4,  # FalconConfig: ffn_hidden_size None means 4 * hidden_size
        one_kv_head=("multi_query", "new_decoder_architecture"),
    ),
    # encoder-decoder: the encoder's stack; relative positions, so no context
    "t5": Family(_T5, "feed_forward_proj", None),
}

# Any other config: the first present, non-null spelling wins (Hugging Face's, GPT-2's and
# nanoGPT's, Meta's params.json, T5's).
GENERIC: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "width": ("hidden_size", "n_embd", "n_embed", "d_model", "dim"),
    "heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "kv_heads": ("num_key_value_heads", "n_kv_head", "n_kv_heads", "num_kv_heads"),
    "head_dim": ("head_dim", "d_kv"),
    "ffn": ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "ffn_hidden_size"),
    "vocab": ("vocab_size", "n_vocab"),
    "context": ("max_position_embeddings", "n_positions", "n_ctx", "block_size", "max_seq_len"),
}
GENERIC_ACTS = ("hidden_act", "activation_function", "hidden_activation", "feed_forward_proj",
                "mlp_type")  # fmt: skip
# A generic key whose explicit null means a multiple of the width (GPT-2 and GPT-J's n_inner,
# Falcon's ffn_hidden_size: 4 * width).
GENERIC_NULL_FFN = {"n_inner": 4, "ffn_hidden_size": 4}

# Activations of a gated MLP (the activation of the gate; SwiGLU, GeGLU, ReGLU by name), and
# T5's "gated-<act>" spelling of feed_forward_proj.
GATED_ACTS = frozenset({"silu", "swish", "swiglu", "geglu", "reglu"})
GATED_PREFIX = "gated-"

# Mixture-of-experts fields (a config with one of these, non-zero, is not a dense model).
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")

# Yes/no fields (``tm plan``'s layout): field -> (config key, value when absent or null).
# PretrainedConfig ties the output head to the token table unless told not to
# (configuration_utils.py); LlamaConfig's attention_bias and mlp_bias default to false.
FLAGS: dict[str, tuple[str, bool]] = {
    "tied_embeddings": ("tie_word_embeddings", True),
    "attention_bias": ("attention_bias", False),
    "mlp_bias": ("mlp_bias", False),
}

# An attention module's own head count, for a model without a config (the agent reads the
# first module that has one): nanoGPT's CausalSelfAttention.n_head, torch's
# nn.MultiheadAttention.num_heads, Hugging Face attention modules' num_heads or
# num_attention_heads, and the nhead some hand-written blocks keep.
MODULE_HEADS = ("n_head", "num_heads", "num_attention_heads", "n_heads", "nhead")


def spelled_like_gpt2(config: Mapping[str, Any]) -> bool:
    """Whether a config.json spells the width GPT-2's way (``n_embd``) and not Llama's
    (``hidden_size``): ``tm plan`` then reads a config naming no ``model_type`` as GPT-2's, and
    plans GPT-2's layout."""
    return _GPT2["width"] in config and _LLAMA["width"] not in config


def gated_activation(name: str) -> bool:
    """True when the activation ``name`` means a gated MLP: one of :data:`GATED_ACTS` or T5's
    ``gated-<act>`` (case and surrounding spaces ignored)."""
    act = name.strip().lower()
    return act in GATED_ACTS or act.startswith(GATED_PREFIX)


@dataclass(frozen=True)
class Reading:
    """What :func:`read` found in one config.

    Attributes:
        values: field -> whole number > 0, for each field found (or given by a default).
        gated: the MLP is gated (True) or plain (False); None when the config does not say.
        source: field (and ``"gated"``) -> where it came from: the config key, ``"model_type"``,
            or the default in words (``"4 * n_embd (n_inner unset)"``).
        bad: field -> (key, value) for a key present with a value that is not a whole number
            > 0 (an activation that is not a string is listed under ``"gated"``).
        family: the ``model_type`` whose table was used; None for the generic spellings.
    """

    values: dict[str, int] = field(default_factory=dict)
    gated: bool | None = None
    source: dict[str, str] = field(default_factory=dict)
    bad: dict[str, tuple[str, Any]] = field(default_factory=dict)
    family: str | None = None


def family_of(config: Any, default: str | None = None) -> str | None:
    """The :data:`FAMILIES` name ``config`` is read as: its ``model_type`` when listed, else
    ``default`` when the config names no model type at all, else None (generic)."""
    kind = _getter(config)("model_type")
    if isinstance(kind, str) and kind:
        return kind if kind in FAMILIES else None
    return default if default in FAMILIES else None


def spellings(name: str, family: str | None) -> tuple[str, ...]:
    """The keys tried for ``name`` (a field of :data:`FIELDS`, or ``"act"``) under ``family``
    (None: generic), first first; empty when the family has no key for it."""
    if family is not None:
        fam = FAMILIES[family]
        key = fam.act if name == "act" else fam.keys.get(name)
        return (key,) if key else ()
    return GENERIC_ACTS if name == "act" else GENERIC.get(name, ())


def read(config: Any, *, default_family: str | None = None) -> Reading:
    """The shape fields a model config gives, with the defaults its family applies to nulls.

    Args:
        config: a mapping (a parsed ``config.json``) or an object with attributes (a
            ``PretrainedConfig``, nanoGPT's ``GPTConfig``); None reads as empty.
        default_family: the family to read a config that names no ``model_type`` as (``tm
            plan`` reads a GPT-2-spelled config.json as ``"gpt2"``); None: generic spellings.
    Returns:
        A :class:`Reading`. Nothing is guessed: a field the config does not give is absent.
    Raises:
        Nothing: an attribute that cannot be read counts as absent.
    """
    get = _getter(config)
    fam_name = family_of(config, default_family)
    fam = FAMILIES.get(fam_name) if fam_name else None
    out = Reading(family=fam_name)
    for name in FIELDS:
        _read_field(get, name, spellings(name, fam_name), out)
    if fam is not None:
        _family_rules(get, fam, out)
    elif "ffn" not in out.values and "ffn" not in out.bad:
        _generic_null_ffn(get, out)
    gated, source = _gating(get, fam, out)
    return Reading(out.values, gated, {**out.source, **source}, out.bad, fam_name)


_ABSENT = object()  # a key the config does not hold (a null value is None)


def _getter(config: Any):
    """``get(key, absent=None)``: the config's value for ``key``, ``absent`` when it has none."""
    if config is None:
        return lambda key, absent=None: absent
    if isinstance(config, Mapping):
        return config.get

    def get(key: str, absent: Any = None) -> Any:
        try:
            return getattr(config, key, absent)
        except Exception:  # a property that raises: absent, never an error in the caller
            return absent

    return get


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _read_field(get, name: str, keys: tuple[str, ...], out: Reading) -> None:
    """The first key of ``keys`` that is present and not null gives ``name``."""
    for key in keys:
        value = get(key)
        if value is None:
            continue
        if _is_count(value):
            out.values[name] = value
            out.source[name] = key
        else:
            out.bad[name] = (key, value)
        return


def _family_rules(get, fam: Family, out: Reading) -> None:
    """A family's defaults for null or absent keys, and Falcon's multi-query rule."""
    width = out.values.get("width")
    if fam.ffn_default and "ffn" not in out.values and "ffn" not in out.bad and width:
        key = fam.keys.get("ffn")
        out.values["ffn"] = fam.ffn_default * width
        unset = f" ({key} unset)" if key else ""
        out.source["ffn"] = f"{fam.ffn_default} * {fam.keys['width']}{unset}"
    if fam.one_kv_head:
        flag, unless = fam.one_kv_head
        if get(flag) is True and get(unless) is not True:
            out.values["kv_heads"] = 1
            out.source["kv_heads"] = f"{flag} (one key/value head)"
            out.bad.pop("kv_heads", None)


def _generic_null_ffn(get, out: Reading) -> None:
    """A generic config's explicit ``n_inner: null`` (or ``ffn_hidden_size``): 4 * width."""
    width = out.values.get("width")
    for key, times in GENERIC_NULL_FFN.items():
        if width and get(key, _ABSENT) is None:
            out.values["ffn"] = times * width
            out.source["ffn"] = f"{times} * {out.source['width']} ({key} is null)"
            return


def _gating(get, fam: Family | None, out: Reading) -> tuple[bool | None, dict[str, str]]:
    """(gated, source): the family's fixed answer, else the activation's name."""
    if fam is not None and fam.gated is not None:
        return fam.gated, {"gated": "model_type"}
    keys = GENERIC_ACTS if fam is None else (fam.act,) if fam.act else ()
    for key in keys:
        act = get(key)
        if act is None:
            continue
        if not isinstance(act, str):
            out.bad["gated"] = (key, act)
            return None, {}
        return gated_activation(act), {"gated": key}
    return None, {}


__all__ = [
    "FAMILIES",
    "FIELDS",
    "FLAGS",
    "GATED_ACTS",
    "GENERIC",
    "GENERIC_ACTS",
    "MODULE_HEADS",
    "MOE_KEYS",
    "Family",
    "Reading",
    "family_of",
    "gated_activation",
    "read",
    "spelled_like_gpt2",
    "spellings",
]
