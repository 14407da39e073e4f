"""Training FLOPs per token under named conventions (forward + backward, one token).

Every figure here is "model FLOPs": what the model mathematically requires per token under a
stated convention, not what the GPU executed (no recompute, no padding waste, no optimizer).
The same run gives a different number under each convention; trainmeter always shows the
convention's name beside the number (docs/spec.md "Numbers").

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

CONVENTIONS = ("hf", "megatron", "titan", "embeddings")
DEFAULT_CONVENTION = "titan"

# Megatron-LM pads the vocabulary up to a multiple of make_vocab_size_divisible_by (default 128)
# times the tensor-parallel size; trainmeter assumes TP=1 (megatron/training/arguments.py and
# megatron/training/tokenizer/tokenizer.py::_vocab_size_with_padding).
MEGATRON_VOCAB_MULTIPLE = 128

_COUNTS = ("params", "embedding_params", "token_embedding_params")
_DIMS = ("layers", "width", "heads", "kv_heads", "head_dim", "ffn", "vocab", "seq_len")
_FLAGS = ("gated_mlp", "tied_embeddings")


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """What the FLOP conventions need to know about a dense decoder-only transformer.

    Attributes:
        params: all unique parameters (a tied input/output matrix counted once), as
            ``sum(p.numel() for p in model.parameters())`` gives.
        embedding_params: weights of every ``nn.Embedding`` module (token table, learned
            position table, ...): what ``transformers``' ``num_parameters(exclude_embeddings=True)``
            removes. A tied output head is inside this number (it is the token table).
        token_embedding_params: the input token table alone (vocab x width).
        layers: transformer blocks.
        width: d_model.
        heads: query heads.
        kv_heads: key/value heads (GQA/MQA); None means ``heads`` (full multi-head attention).
        head_dim: per-head size; None means ``width // heads``.
        ffn: MLP hidden size (for a gated MLP, the size of one of its two up projections).
        gated_mlp: True for a 3-matrix MLP (SwiGLU/GeGLU), False for the 2-matrix one.
        vocab: vocabulary size as the tokenizer has it (before any padding).
        seq_len: tokens per training sequence actually trained (not the model's maximum).
        tied_embeddings: True when the output head reuses the input token table.

    Raises:
        ValueError: a count is negative or not an int, a dimension is not a positive int, the
            counts are inconsistent (token table > all embeddings > all params), kv_heads does
            not divide heads, or head_dim is missing while width is not a multiple of heads.
    """

    params: int
    embedding_params: int
    token_embedding_params: int
    layers: int | None = None
    width: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    ffn: int | None = None
    gated_mlp: bool = False
    vocab: int | None = None
    seq_len: int | None = None
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in _COUNTS:
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ValueError(f"ModelShape.{name} must be an int >= 0, got {value!r}")
        for name in _DIMS:
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value <= 0):
                raise ValueError(f"ModelShape.{name} must be a positive int or None, got {value!r}")
        for name in _FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ModelShape.{name} must be a bool, got {getattr(self, name)!r}")
        if self.token_embedding_params > self.embedding_params:
            raise ValueError(
                f"ModelShape.token_embedding_params ({self.token_embedding_params}) exceeds "
                f"embedding_params ({self.embedding_params}): the token table is one of the "
                "embedding modules"
            )
        if self.embedding_params > self.params:
            raise ValueError(
                f"ModelShape.embedding_params ({self.embedding_params}) exceeds params "
                f"({self.params})"
            )
        self._check_heads()

    def _check_heads(self) -> None:
        if self.kv_heads is not None and self.heads is not None and self.heads % self.kv_heads:
            raise ValueError(
                f"ModelShape.kv_heads ({self.kv_heads}) must divide heads ({self.heads})"
            )
        if self.head_dim is None and self.width and self.heads and self.width % self.heads:
            raise ValueError(
                f"ModelShape.width ({self.width}) is not a multiple of heads ({self.heads}); "
                "pass head_dim explicitly"
            )

    @property
    def resolved_head_dim(self) -> int | None:
        """Per-head size: ``head_dim``, else ``width // heads``, else None."""
        if self.head_dim is not None:
            return self.head_dim
        if self.width is not None and self.heads is not None:
            return self.width // self.heads
        return None

    @property
    def resolved_kv_heads(self) -> int | None:
        """Key/value heads: ``kv_heads``, else ``heads`` (full multi-head attention)."""
        return self.kv_heads if self.kv_heads is not None else self.heads


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def hf_flops_per_token(shape: ModelShape) -> float:
    """Hugging Face ``transformers``' training FLOPs per token.

    Inputs: ``shape.params`` and ``shape.embedding_params`` (counts of weights).
    Formula (FLOP per token): ``6 * (params - embedding_params)``.
    Source: ``ModuleUtilsMixin.floating_point_ops`` = ``6 * estimate_tokens * num_parameters(
    exclude_embeddings=True)`` and ``num_parameters`` drops the ``.weight`` of every
    ``nn.Embedding`` module (huggingface/transformers, src/transformers/modeling_utils.py), after
    Kaplan et al. 2020 (arXiv:2001.08361) section 2.1.
    Leaves out: attention scores and values (the ``12 * L * d * seq`` term), every embedding
    table, and, when the head is tied, the output-head matmul (the shared weight is listed under
    the embedding's name and so excluded). An untied ``lm_head`` is a Linear and counts.
    Raises: nothing (a valid ModelShape always has the two counts).
    """
    return float(6 * (shape.params - shape.embedding_params))


def megatron_flops_per_token(shape: ModelShape) -> float | None:
    """Megatron-LM's training FLOPs per token for a dense GPT (causal attention halved).

    Inputs: layers L, width d, heads, kv_heads, head_dim, ffn, gated_mlp, vocab V, seq_len s.
    Formula (FLOP per token), with q = heads*head_dim, kv = kv_heads*head_dim and V' = V rounded
    up to a multiple of 128::

        L * 6 * (d*(q + 2*kv) + q*s + q*d)     # QKV proj, QK^T + AV (causal s/2, x2), out proj
      + L * 6 * d * ffn * (3 if gated else 2)  # MLP
      + 6 * d * V'                             # logits

    equivalently ``12*L*d^2 * [(1 + kv/q + s/(2d)) * q/d + (ffn/d) * (1.5 if gated else 1)
    + V'/(2*L*d)]``. Source: ``transformer_flops``
    inside ``num_floating_point_operations`` in NVIDIA/Megatron-LM
    megatron/training/training.py (the ``query_projection_size * seq_length / 2 * 2`` causal
    term came in 2025; before it the attention term counted the full square); padding from
    ``_vocab_size_with_padding`` (megatron/training/tokenizer/tokenizer.py) with
    ``--make-vocab-size-divisible-by`` 128 and tensor parallel size 1.
    Leaves out: MoE, MTP, MLA and linear-attention variants (dense GPT only), embedding lookup,
    softmax and norms, recompute. Assumes TP=1 for the vocabulary padding.
    Returns None when layers, width, heads, ffn, vocab or seq_len is unknown.
    """
    s = shape
    head_dim, kv_heads = s.resolved_head_dim, s.resolved_kv_heads
    needed = (s.layers, s.width, s.heads, s.ffn, s.vocab, s.seq_len, head_dim, kv_heads)
    if any(v is None for v in needed):
        return None
    d, q, kv = s.width, s.heads * head_dim, kv_heads * head_dim
    padded_vocab = -(-s.vocab // MEGATRON_VOCAB_MULTIPLE) * MEGATRON_VOCAB_MULTIPLE
    attention = 6 * (d * (q + 2 * kv) + q * s.seq_len + q * d)
    mlp = 6 * d * s.ffn * (3 if s.gated_mlp else 2)
    return float(s.layers * (attention + mlp) + 6 * d * padded_vocab)


def titan_flops_per_token(shape: ModelShape) -> float | None:
    """TorchTitan's (= PaLM's MFU) training FLOPs per token.

    Inputs: params, embedding_params, token_embedding_params, tied_embeddings, layers L,
    heads H, head_dim Q, seq_len T.
    Formula (FLOP per token): ``6 * N + 12 * L * H * Q * T`` where N is every parameter except
    the embedding tables, keeping a token table that is shared with the output head:
    ``N = params - embedding_params + (token_embedding_params if tied else 0)``.
    Source: PaLM (Chowdhery et al. 2022, arXiv:2204.02311) appendix B; pytorch/torchtitan
    torchtitan/models/utils.py ``get_nparams_and_active_nparams`` ("Embedding tables are
    excluded unless their parameter is shared with the output head") and
    ``quadratic_attention_flops_per_token`` (6 * heads * (qk_dim + v_dim) * seq); nanoGPT's
    ``estimate_mfu`` gives the same N for GPT-2 (all parameters minus the position table).
    For an untied model without a position table this is ``6 * (params - token table) + 12LHQT``.
    Leaves out: causal masking (attention counted over the full square), softmax, recompute
    (flash-attention's backward recompute is not counted). Counts norm weights as if matmuls.
    Returns None when layers, heads, head_dim (or width) or seq_len is unknown.
    """
    s = shape
    head_dim = s.resolved_head_dim
    if s.layers is None or s.heads is None or head_dim is None or s.seq_len is None:
        return None
    kept_token_table = s.token_embedding_params if s.tied_embeddings else 0
    n = s.params - s.embedding_params + kept_token_table
    return float(6 * n + 12 * s.layers * s.heads * head_dim * s.seq_len)


def embeddings_flops_per_token(shape: ModelShape) -> float | None:
    """Every matmul, embeddings included (Chinchilla-style: lookups counted as matmuls).

    Inputs: params, token_embedding_params, tied_embeddings, layers L, heads H, head_dim Q,
    seq_len T.
    Formula (FLOP per token): ``6 * (params + (token_embedding_params if tied else 0))
    + 12 * L * H * Q * T``: every weight is used once per token (the input lookup counted as a
    one-hot matmul), a tied table twice (lookup and output head), plus full attention.
    Source: Hoffmann et al. 2022 (Chinchilla, arXiv:2203.15556) appendix F counts embeddings as
    ``2 * seq * vocab * d`` matmuls and training as 3x forward; the attention term is PaLM's.
    Leaves out: Chinchilla's softmax term (``3 * H * T`` per token per layer) and its exact
    per-op count (6.678 G instead of 6.676 G for the reference model), causal masking, recompute.
    Counts norm weights and any position table as if matmuls.
    Returns None when layers, heads, head_dim (or width) or seq_len is unknown.
    """
    s = shape
    head_dim = s.resolved_head_dim
    if s.layers is None or s.heads is None or head_dim is None or s.seq_len is None:
        return None
    used = s.params + (s.token_embedding_params if s.tied_embeddings else 0)
    return float(6 * used + 12 * s.layers * s.heads * head_dim * s.seq_len)


_BY_NAME = {
    "hf": hf_flops_per_token,
    "megatron": megatron_flops_per_token,
    "titan": titan_flops_per_token,
    "embeddings": embeddings_flops_per_token,
}


def flops_per_token(shape: ModelShape, convention: str) -> float | None:
    """Training FLOPs (forward + backward) per token of ``shape`` under ``convention``.

    Inputs: a ModelShape; a convention name from CONVENTIONS.
    Formula and source: see ``hf_flops_per_token``, ``megatron_flops_per_token``,
    ``titan_flops_per_token`` and ``embeddings_flops_per_token`` (docs/spec.md "Numbers").
    Returns: FLOP per token as a float, or None when the shape lacks a field the convention
    needs (``hf`` never returns None).
    Raises: ValueError for an unknown convention name; the message lists the known ones.
    Leaves out: whatever the chosen convention leaves out (each function says).
    """
    try:
        fn = _BY_NAME[convention]
    except (KeyError, TypeError):
        known = ", ".join(CONVENTIONS)
        raise ValueError(f"unknown FLOPs convention {convention!r}; known: {known}") from None
    return fn(shape)


# The shape fields each convention's formula reads (hf: the two counts, always present).
_NEEDS = {
    "hf": (),
    "megatron": ("layers", "width", "heads", "ffn", "vocab", "seq_len"),
    "titan": ("layers", "heads", "head_dim", "seq_len"),
    "embeddings": ("layers", "heads", "head_dim", "seq_len"),
}


def missing_fields(shape: ModelShape, convention: str) -> tuple[str, ...]:
    """The ``ModelShape`` fields ``convention`` needs and ``shape`` lacks, in field order.

    Inputs: a ModelShape; a convention name from CONVENTIONS.
    Returns: a tuple of field names, empty exactly when ``flops_per_token(shape, convention)``
    is a number. ``head_dim`` is missing only when ``width`` is too (it defaults to width /
    heads); ``kv_heads`` is never missing (it defaults to heads). Source: the inputs each
    ``*_flops_per_token`` function checks before it computes.
    Raises: ValueError for an unknown convention name, as :func:`flops_per_token`.
    """
    if not isinstance(convention, str) or convention not in _NEEDS:
        known = ", ".join(CONVENTIONS)
        raise ValueError(f"unknown FLOPs convention {convention!r}; known: {known}")
    present = {name: getattr(shape, name) is not None for name in _DIMS}
    present["head_dim"] = present["head_dim"] or present["width"]
    return tuple(name for name in _NEEDS[convention] if not present[name])


def all_conventions(shape: ModelShape) -> dict[str, float | None]:
    """FLOPs per token under every convention, keyed by name in CONVENTIONS order.

    Inputs: a ModelShape. Returns: ``{name: FLOP per token or None}``. Raises: nothing.
    Source and omissions: as ``flops_per_token`` for each name.
    """
    return {name: flops_per_token(shape, name) for name in CONVENTIONS}


def all_conventions_at(shape: ModelShape, seq_len: float | None) -> dict[str, float | None]:
    """FLOPs per token under every convention at a real-valued sequence length (FLOP/token).

    Inputs: a ModelShape; ``seq_len``, tokens per sequence (> 0), such as the token-weighted
    mean length of a run whose sequences vary (``sum of T_i**2 / sum of T_i`` over its
    sequences), or None for ``shape.seq_len`` itself.
    Formula: every convention is affine in the sequence length (``a + b * T``: the attention
    term is the only one with T in it, see each function), so its value at a real T is the
    line through its values at T = 1 and T = 2: ``f(1) + (T - 1) * (f(2) - f(1))``. For
    steps of lengths T_i with t_i tokens each, ``f(mean) * sum(t_i) = sum(f(T_i) * t_i)``:
    FLOPs spent integrate the attention term over the real lengths.
    Returns: ``{name: FLOP per token or None}`` as :func:`all_conventions`.
    Raises: nothing.
    """
    if seq_len is None or shape.seq_len is None or not seq_len > 0:
        return all_conventions(shape)
    out = {}
    for name, (f1, f2) in _ends(shape).items():
        out[name] = None if f1 is None or f2 is None else f1 + (seq_len - 1) * (f2 - f1)
    return out


@lru_cache(maxsize=16)
def _ends(shape: ModelShape) -> dict[str, tuple[float | None, float | None]]:
    """``{name: (f(1), f(2))}``: each convention at T = 1 and T = 2, kept for the few shapes of
    a run (the engine asks at every timed step; ModelShape is frozen, so it is a key)."""
    one, two = replace(shape, seq_len=1), replace(shape, seq_len=2)
    return {n: (flops_per_token(one, n), flops_per_token(two, n)) for n in CONVENTIONS}


def reference_model() -> ModelShape:
    """The pinned reference model of the product brief.

    d_model 2048, 18 layers, context 1024, vocab 32000, untied input and output embeddings,
    16 heads (full multi-head attention), MLP 4 x d (non-gated), no biases, two norm weight
    vectors per layer and one final norm: 1,037,117,440 parameters, of which 65,536,000 in the
    token table (its only embedding module: no position table). Counts are derived in
    tests/unit/test_flops.py by hand.
    """
    return ModelShape(
        params=1_037_117_440,
        embedding_params=65_536_000,
        token_embedding_params=65_536_000,
        layers=18,
        width=2048,
        heads=16,
        ffn=8192,
        vocab=32000,
        seq_len=1024,
    )


__all__ = [
    "CONVENTIONS",
    "DEFAULT_CONVENTION",
    "ModelShape",
    "all_conventions",
    "all_conventions_at",
    "embeddings_flops_per_token",
    "flops_per_token",
    "hf_flops_per_token",
    "megatron_flops_per_token",
    "missing_fields",
    "reference_model",
    "titan_flops_per_token",
]
