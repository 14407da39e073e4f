"""Model shapes for planning: named presets, Hugging Face ``config.json`` files, explicit sizes.

An :class:`Architecture` is what a person knows about a dense decoder-only transformer before
training it (layers, width, heads, ...). From it this module counts the parameters the way the
model's own code creates them and builds the :class:`~trainmeter.core.flops.ModelShape` that the
FLOPs conventions need (``Architecture.shape``). ``tm plan`` reads a model through here
(docs/spec.md "Planning a run (`tm plan`)"). Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainmeter.core import hfconfig
from trainmeter.core.flops import ModelShape
from trainmeter.core.units import quoted


class ConfigError(ValueError):
    """A model description that cannot be planned; the message names the field at fault."""


MAX_CONFIG_BYTES = 16 << 20  # a config.json is kilobytes; more is the wrong file
_POSITIVE = ("layers", "width", "heads", "vocab", "context", "ffn")
_OPTIONAL = ("kv_heads", "head_dim")
_FLAGS = ("gated_mlp", "tied_embeddings", "attention_bias", "mlp_bias", "norm_bias")


@dataclass(frozen=True, kw_only=True)
class Architecture:
    """A dense decoder-only transformer as it is configured (sizes, not weights).

    Attributes:
        layers: transformer blocks (L).
        width: d_model (d).
        heads: query heads (H).
        vocab: vocabulary size as configured (V; no padding).
        context: tokens per training sequence (T); the FLOPs conventions' ``seq_len``.
        ffn: MLP hidden size (for a gated MLP, the size of each of its two up projections).
        kv_heads: key/value heads (GQA/MQA); None means ``heads``.
        head_dim: per-head size; None means ``width // heads``.
        gated_mlp: True for a 3-matrix MLP (SwiGLU/GeGLU: gate, up, down), False for 2.
        tied_embeddings: the output head reuses the input token table.
        position_table: rows of a learned absolute position table (GPT-2: 1024); 0 for none
            (rotary or no positions). ``context`` may not exceed it when it is > 0.
        attention_bias: biases on the q, k, v and output projections (GPT-2; Llama's
            ``attention_bias``).
        mlp_bias: biases on the MLP projections (GPT-2; Llama's ``mlp_bias``).
        norm_bias: LayerNorm with weight and bias (GPT-2); False for RMSNorm (weight only).

    Raises:
        ConfigError: a size is not a positive int, a flag is not a bool, ``kv_heads`` does not
            divide ``heads``, ``width`` is not a multiple of ``heads`` without ``head_dim``, or
            ``context`` exceeds a learned position table.
    """

    layers: int
    width: int
    heads: int
    vocab: int
    context: int
    ffn: int
    kv_heads: int | None = None
    head_dim: int | None = None
    gated_mlp: bool = False
    tied_embeddings: bool = False
    position_table: int = 0
    attention_bias: bool = False
    mlp_bias: bool = False
    norm_bias: bool = False

    def __post_init__(self) -> None:
        for name in _POSITIVE + _OPTIONAL:
            value = getattr(self, name)
            if name in _OPTIONAL and value is None:
                continue
            if not _is_int(value) or value <= 0:
                raise ConfigError(f"{name} must be a whole number > 0, got {value!r}")
        if not _is_int(self.position_table) or self.position_table < 0:
            raise ConfigError(
                f"position_table must be a whole number >= 0, got {self.position_table!r}"
            )
        for name in _FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        kv = self.resolved_kv_heads
        if self.heads % kv:
            raise ConfigError(f"kv_heads ({kv}) must divide heads ({self.heads})")
        if self.head_dim is None and self.width % self.heads:
            raise ConfigError(
                f"width ({self.width}) is not a multiple of heads ({self.heads}); give head_dim"
            )
        if self.position_table and self.context > self.position_table:
            raise ConfigError(
                f"context {self.context} exceeds the learned position table "
                f"({self.position_table} positions)"
            )

    @property
    def resolved_kv_heads(self) -> int:
        """Key/value heads: ``kv_heads``, else ``heads``."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def resolved_head_dim(self) -> int:
        """Per-head size: ``head_dim``, else ``width // heads``."""
        return self.width // self.heads if self.head_dim is None else self.head_dim

    @property
    def token_embedding_params(self) -> int:
        """The input token table: ``vocab * width`` weights."""
        return self.vocab * self.width

    @property
    def embedding_params(self) -> int:
        """Weights of every embedding table: token table plus ``position_table * width``.

        What Hugging Face's ``num_parameters(exclude_embeddings=True)`` removes (every
        ``nn.Embedding``); a tied head is the token table, an untied head is not an embedding.
        """
        return self.token_embedding_params + self.position_table * self.width

    @property
    def layer_params(self) -> int:
        """Weights of one block (count), with q = H*head_dim and kv = kv_heads*head_dim.

        Formula: attention ``d*q + 2*d*kv + q*d`` (+ ``q + 2*kv + d`` biases); MLP
        ``(3 if gated else 2) * d * ffn`` (+ ``(2 if gated else 1) * ffn + d`` biases); two
        norms ``2 * d`` (``4 * d`` with LayerNorm biases). Source: the modules that Hugging Face
        ``LlamaDecoderLayer`` (q/k/v/o_proj, gate/up/down_proj, input_layernorm,
        post_attention_layernorm) and ``GPT2Block`` (ln_1, c_attn, c_proj, ln_2, c_fc,
        c_proj) create, in huggingface/transformers ``models/llama/modeling_llama.py`` and
        ``models/gpt2/modeling_gpt2.py``. Leaves out: extra norms some families add (Gemma 2's
        four per block, QK-norm), Qwen2's q/k/v-only biases.
        """
        d, ffn = self.width, self.ffn
        q = self.heads * self.resolved_head_dim
        kv = self.resolved_kv_heads * self.resolved_head_dim
        attention = d * q + 2 * d * kv + q * d
        if self.attention_bias:
            attention += q + 2 * kv + d
        mlp = (3 if self.gated_mlp else 2) * d * ffn
        if self.mlp_bias:
            mlp += (2 if self.gated_mlp else 1) * ffn + d
        return attention + mlp + 2 * self._norm_params

    @property
    def params(self) -> int:
        """All unique weights (count), a tied table once.

        Formula: ``embedding_params + layers * layer_params + final norm (d, or 2d with a bias)
        + (0 if tied else vocab * d)`` (the untied output head has no bias). As
        ``sum(p.numel() for p in model.parameters())`` gives for ``LlamaForCausalLM`` and
        ``GPT2LMHeadModel``.
        """
        head = 0 if self.tied_embeddings else self.vocab * self.width
        return self.embedding_params + self.layers * self.layer_params + self._norm_params + head

    @property
    def _norm_params(self) -> int:
        return self.width * (2 if self.norm_bias else 1)

    def shape(self) -> ModelShape:
        """The :class:`~trainmeter.core.flops.ModelShape` of this model (``seq_len = context``)."""
        return ModelShape(
            params=self.params,
            embedding_params=self.embedding_params,
            token_embedding_params=self.token_embedding_params,
            layers=self.layers,
            width=self.width,
            heads=self.heads,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            ffn=self.ffn,
            gated_mlp=self.gated_mlp,
            vocab=self.vocab,
            seq_len=self.context,
            tied_embeddings=self.tied_embeddings,
        )

    def as_dict(self) -> dict[str, Any]:
        """Every attribute as plain data, with ``kv_heads`` and ``head_dim`` resolved."""
        out = asdict(self)
        out["kv_heads"] = self.resolved_kv_heads
        out["head_dim"] = self.resolved_head_dim
        return out


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Preset:
    """A named model that ships with trainmeter.

    Attributes: ``name`` (what ``tm plan NAME`` takes), ``title`` (for people), ``arch``,
    ``source`` (where every size was read), ``aliases`` (other names accepted).
    """

    name: str
    title: str
    arch: Architecture
    source: str
    aliases: tuple[str, ...] = ()


_PRESETS: tuple[Preset, ...] = (
    Preset(
        "gpt2-124m",
        "GPT-2 small (124M)",
        Architecture(
            layers=12,
            width=768,
            heads=12,
            vocab=50257,
            context=1024,
            ffn=3072,
            tied_embeddings=True,
            position_table=1024,
            attention_bias=True,
            mlp_bias=True,
            norm_bias=True,
        ),
        "openai-community/gpt2 config.json on the Hugging Face Hub (n_layer 12, n_embd 768, "
        "n_head 12, n_positions 1024, vocab_size 50257, activation_function gelu_new; n_inner "
        "unset = 4 * n_embd; tie_word_embeddings unset = true); layout of GPT2LMHeadModel in "
        "huggingface/transformers models/gpt2/modeling_gpt2.py (biases on every Linear, "
        "LayerNorm with bias, learned position table). 124,439,808 parameters.",
        ("gpt2", "gpt2-small"),
    ),
    Preset(
        "llama3-8b",
        "Meta Llama 3 8B",
        Architecture(
            layers=32,
            width=4096,
            heads=32,
            kv_heads=8,
            vocab=128256,
            context=8192,
            ffn=14336,
            gated_mlp=True,
        ),
        "meta-llama/Meta-Llama-3-8B config.json on the Hugging Face Hub (num_hidden_layers 32, "
        "hidden_size 4096, num_attention_heads 32, num_key_value_heads 8, intermediate_size "
        "14336, vocab_size 128256, max_position_embeddings 8192, hidden_act silu, "
        "tie_word_embeddings false, attention_bias false); layout of LlamaForCausalLM in "
        "huggingface/transformers models/llama/modeling_llama.py (no biases, RMSNorm weights, "
        "rotary positions). 8,030,261,248 parameters.",
        ("llama-3-8b", "meta-llama-3-8b"),
    ),
    Preset(
        "reference-1b",
        "trainmeter's 1.04B reference model",
        Architecture(
            layers=18,
            width=2048,
            heads=16,
            vocab=32000,
            context=1024,
            ffn=8192,
        ),
        'the product brief\'s reference model (docs/spec.md "FLOPs per token", '
        "flops.reference_model()): d_model 2048, 18 layers, context 1024, vocab 32000, untied, "
        "16 heads, MLP 4d not gated, no biases, two norm weight vectors per layer and a final "
        "norm, no position table. 1,037,117,440 parameters.",
        ("reference", "ref-1b"),
    ),
)


def presets() -> tuple[Preset, ...]:
    """Every preset, in a stable order (gpt2-124m, llama3-8b, reference-1b)."""
    return _PRESETS


def preset(name: str) -> Preset | None:
    """The preset called ``name`` or one of its aliases (any case), else None."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower()
    for p in _PRESETS:
        if key == p.name or key in p.aliases:
            return p
    return None


# ------------------------------------------------------------------------------------------
# Hugging Face config.json
# ------------------------------------------------------------------------------------------


def _spelled(names: tuple[str, ...]) -> str:
    return names[0] + (f" (or {', '.join(names[1:])})" if len(names) > 1 else "")


def _need(r: hfconfig.Reading, name: str, hint: str = "") -> int:
    """Field ``name`` of a config reading, or ConfigError naming the key(s) that would give it."""
    if name in r.bad:
        key, value = r.bad[name]
        raise ConfigError(f"field {key} must be a whole number > 0, got {value!r}")
    if name not in r.values:
        names = hfconfig.spellings(name, r.family) or (name,)
        raise ConfigError(f"missing field {_spelled(names)}{hint}")
    return r.values[name]


def _optional(r: hfconfig.Reading, name: str) -> int | None:
    return _need(r, name) if name in r.values or name in r.bad else None


def _flag(config: Mapping[str, Any], name: str, default: bool) -> bool:
    value = config.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"field {name} must be true or false, got {value!r}")
    return value


def _gated(r: hfconfig.Reading) -> bool:
    if "gated" in r.bad:
        key, act = r.bad["gated"]
        raise ConfigError(f"field {key} must be an activation name, got {act!r}")
    if r.gated is None:
        raise ConfigError(
            f"missing field {_spelled(hfconfig.spellings('act', r.family))}: the MLP activation "
            "tells a gated MLP (silu, swiglu, geglu: 3 matrices) from a plain one (gelu: 2)"
        )
    return r.gated


def from_hf_config(config: Mapping[str, Any], context: int | None = None) -> Architecture:
    """The :class:`Architecture` a Hugging Face ``config.json`` (read as plain JSON) describes.

    Inputs: ``config``, the parsed JSON object; ``context``, a sequence length that replaces
    the config's (tokens; None keeps the config's).
    Fields: read by :func:`trainmeter.core.hfconfig.read`, which names the keys of each
    ``model_type`` (``num_hidden_layers``, ``hidden_size``, ... for Llama; ``n_layer``,
    ``n_embd``, ``n_inner`` (null: 4 * n_embd), ``n_positions`` for GPT-2; the generic
    spellings for any other type) and whether its MLP is gated (by ``model_type``, else by the
    activation's name); ``kv_heads`` defaults to heads, ``head_dim`` to width / heads.
    Read here: ``tie_word_embeddings`` (default true, as ``PretrainedConfig``),
    ``attention_bias`` and ``mlp_bias`` (default false).
    Layout: GPT-2's (``model_type`` "gpt2", or ``n_embd`` without ``hidden_size`` and no
    ``model_type``, then read as GPT-2's config): biases on every Linear, LayerNorm with bias, a
    learned position table of ``n_positions`` rows; otherwise Llama's: no position table,
    RMSNorm, biases only as ``attention_bias`` / ``mlp_bias`` say. Source: huggingface/
    transformers ``configuration_llama.py``, ``configuration_gpt2.py`` and
    ``configuration_utils.py`` (defaults).
    Raises: ConfigError "config.json: missing field ..." naming the missing or malformed
    field; also for a mixture-of-experts config (dense models only).
    """
    try:
        return _from_hf_config(config, context)
    except ConfigError as exc:
        raise ConfigError(f"config.json: {exc}") from None


def _from_hf_config(config: Mapping[str, Any], context: int | None) -> Architecture:
    if not isinstance(config, Mapping):
        raise ConfigError("not a JSON object")
    moe = next(((k, config[k]) for k in hfconfig.MOE_KEYS if config.get(k) is not None), None)
    if moe is not None and moe[1] != 0:
        raise ConfigError(
            f"field {moe[0]} describes a mixture-of-experts model; tm plan counts dense models "
            "only (describe the active part with --layers/--width/... flags)"
        )
    spelled_gpt2 = hfconfig.spelled_like_gpt2(config)
    r = hfconfig.read(config, default_family="gpt2" if spelled_gpt2 else None)
    gpt2 = r.family == "gpt2" or spelled_gpt2  # model_type "gpt2", or GPT-2's spelling
    sizes = {name: _need(r, name) for name in ("layers", "width", "heads", "vocab", "ffn")}
    positions = _need(r, "context") if gpt2 else 0
    if context is None:
        context = _need(r, "context", ": the training sequence length; give --context")
    return Architecture(
        **sizes,
        kv_heads=_optional(r, "kv_heads"),
        head_dim=_optional(r, "head_dim"),
        gated_mlp=_gated(r),
        context=context,
        tied_embeddings=_flag(config, *hfconfig.FLAGS["tied_embeddings"]),
        position_table=positions,
        attention_bias=gpt2 or _flag(config, *hfconfig.FLAGS["attention_bias"]),
        mlp_bias=gpt2 or _flag(config, *hfconfig.FLAGS["mlp_bias"]),
        norm_bias=gpt2,
    )


def read_hf_config(path: str | Path, context: int | None = None) -> Architecture:
    """Read a Hugging Face ``config.json`` file (or a folder holding one) as plain JSON.

    Inputs: the file or folder path; ``context`` as :func:`from_hf_config`. Nothing is
    imported or downloaded. Raises ConfigError for an unreadable file, invalid JSON, or a
    field :func:`from_hf_config` cannot use (the message names the file and the field).
    """
    p = Path(path)
    try:
        if p.is_dir():
            p = p / "config.json"
        with open(p, "rb") as f:  # read at most MAX_CONFIG_BYTES: /dev/zero is no config
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {quoted(str(p))}: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{quoted(str(p))} is over {MAX_CONFIG_BYTES >> 20} MiB: not a config.json"
        )
    try:
        config = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{p} is not valid JSON: {str(exc)[:100]}") from None
    try:
        return _from_hf_config(config, context)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None


__all__ = [
    "Architecture",
    "ConfigError",
    "Preset",
    "from_hf_config",
    "preset",
    "presets",
    "read_hf_config",
]
