"""The agent reads real Hugging Face models' shape (agent/describe.py with core/hfconfig.py).

Real transformers model classes with tiny random configs, built from config objects (nothing
downloaded), described with the user's torch; every field pinned against the config value it
must equal, one parameter count by hand. Then the module-only rules (no config): GPT-2's
``Conv1D`` projections, a vocabulary of 4 x width, a gated MLP, a model with no block list.
"""

import dataclasses

import pytest
import torch
import transformers

from trainmeter.agent.describe import describe
from trainmeter.core import flops

pytestmark = pytest.mark.slow

TOKENS = {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}  # inside a small vocabulary


def _shape(d: dict) -> flops.ModelShape:
    names = {f.name for f in dataclasses.fields(flops.ModelShape)}
    return flops.ModelShape(**{k: v for k, v in d.items() if k in names})


def _gpt2(vocab: int = 100) -> transformers.GPT2LMHeadModel:
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=vocab,
                                     n_positions=64, **TOKENS)  # fmt: skip
    return transformers.GPT2LMHeadModel(config)


def test_hf_gpt2_gives_every_field_and_a_megatron_figure():
    d = describe(torch, _gpt2(), 16)
    # GPT2Config n_layer 2, n_embd 32, n_head 4, vocab_size 100, n_positions 64; n_inner None
    # = 4 x 32 = 128; GPT2MLP is plain (c_fc, c_proj); lm_head shares wte's weight
    assert {k: d[k] for k in ("layers", "width", "heads", "ffn", "vocab", "context")} == {
        "layers": 2, "width": 32, "heads": 4, "ffn": 128, "vocab": 100, "context": 64,
    }  # fmt: skip
    assert d["gated_mlp"] is False and d["tied_embeddings"] is True
    assert d["kv_heads"] is None and d["head_dim"] is None  # full attention, 32 / 4 = 8
    # parameters by hand (GPT2Block: ln_1, c_attn, c_proj, ln_2, c_fc, c_proj, all biased):
    #   wte 100 x 32 = 3,200; wpe 64 x 32 = 2,048; ln_f 2 x 32 = 64
    #   per layer: ln_1 64 + c_attn 32 x 96 + 96 = 3,168 + c_proj 32 x 32 + 32 = 1,056
    #              + ln_2 64 + c_fc 32 x 128 + 128 = 4,224 + c_proj 128 x 32 + 32 = 4,128
    #              = 12,704; 2 layers 25,408
    #   params = 3,200 + 2,048 + 25,408 + 64 = 30,720 (lm_head is wte)
    assert d["params"] == 30_720
    assert d["embedding_params"] == 3_200 + 2_048 and d["token_embedding_params"] == 3_200
    assert flops.missing_fields(_shape(d), "megatron") == ()
    assert flops.flops_per_token(_shape(d), "megatron") is not None


@pytest.mark.parametrize(
    ("cls", "config"),
    [
        (transformers.LlamaForCausalLM, transformers.LlamaConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=80, vocab_size=100, max_position_embeddings=64, **TOKENS)),
        (transformers.MistralForCausalLM, transformers.MistralConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=1,
            intermediate_size=48, vocab_size=90, max_position_embeddings=64, **TOKENS)),
        (transformers.Qwen2ForCausalLM, transformers.Qwen2Config(
            num_hidden_layers=3, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=64, vocab_size=110, max_position_embeddings=32, **TOKENS)),
        (transformers.GemmaForCausalLM, transformers.GemmaConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
            head_dim=24, intermediate_size=72, vocab_size=100, max_position_embeddings=64,
            **TOKENS)),
        (transformers.PhiForCausalLM, transformers.PhiConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=96,
            vocab_size=100, max_position_embeddings=64, **TOKENS)),
        (transformers.GPTNeoXForCausalLM, transformers.GPTNeoXConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=112,
            vocab_size=100, max_position_embeddings=64, **TOKENS)),
        (transformers.OPTForCausalLM, transformers.OPTConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=4, ffn_dim=80,
            vocab_size=100, max_position_embeddings=64, word_embed_proj_dim=32, **TOKENS)),
        (transformers.BertForMaskedLM, transformers.BertConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
            vocab_size=100, max_position_embeddings=64, pad_token_id=0)),
    ],
    ids=lambda x: getattr(x, "model_type", None) or getattr(x, "__name__", "?"),
)  # fmt: skip
def test_real_models_fields_equal_their_configs(cls, config):
    model = cls(config)
    d = describe(torch, model, 16)
    expected = {
        "layers": config.num_hidden_layers,
        "width": config.hidden_size,
        "heads": config.num_attention_heads,
        # GQA models store it (Phi's None becomes heads in PhiConfig); NeoX, OPT, BERT have none
        "kv_heads": getattr(config, "num_key_value_heads", None),
        "ffn": config.ffn_dim if config.model_type == "opt" else config.intermediate_size,
        "vocab": config.vocab_size,
        "context": config.max_position_embeddings,
        "gated_mlp": config.model_type in ("llama", "mistral", "qwen2", "gemma"),
    }
    assert {k: d[k] for k in expected} == expected
    if config.model_type in ("llama", "mistral", "gemma"):
        assert d["head_dim"] == config.head_dim  # Gemma's 24 is not 32 / 2
    assert d["params"] == model.num_parameters()  # transformers' own count (tied once)
    assert [c for c in flops.CONVENTIONS if flops.missing_fields(_shape(d), c)] == []


class _NoConfig(torch.nn.Module):
    """A model's own modules under a root with no ``config``: only the modules can tell."""

    def __init__(self, **parts):
        super().__init__()
        for name, module in parts.items():
            setattr(self, name, module)


def test_gpt2_conv1d_projections_give_the_ffn_even_when_vocab_is_four_times_width():
    # vocab 128 = 4 x 32 = the MLP's width: c_fc (Conv1D nf 128, nx 32) once in each of the 2
    # blocks, the head Linear(32, 128) once outside them; c_attn (nf 96 = 3 x 32) and c_proj
    # (nf 32) are the fused QKV and the residual width
    gpt = _gpt2(vocab=128)
    d = describe(torch, _NoConfig(transformer=gpt.transformer, lm_head=gpt.lm_head), 16)
    assert (d["layers"], d["width"], d["heads"], d["vocab"]) == (2, 32, 4, 128)
    assert d["ffn"] == 128 and d["gated_mlp"] is False
    assert d["tied_embeddings"] is True
    assert d["params"] == 30_720 + 28 * 32  # the hand count above with 128 - 100 more rows


def test_a_gated_mlp_and_grouped_kv_heads_from_the_modules_alone():
    # Llama: per block q_proj 32->32, k_proj and v_proj 32->16 (2 kv heads x 8), o_proj 32->32,
    # gate_proj and up_proj 32->80, down_proj 80->32: 80 twice a block = gated; the k/v pair
    # (also twice a block) is narrower than the width, so it is not the MLP
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=80,
                                      vocab_size=100, **TOKENS)  # fmt: skip
    llama = transformers.LlamaForCausalLM(config)
    d = describe(torch, _NoConfig(model=llama.model, lm_head=llama.lm_head), 16)
    assert (d["layers"], d["width"], d["ffn"], d["gated_mlp"]) == (2, 32, 80, True)


class _Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)


class _Tiny(torch.nn.Module):
    """A nanoGPT-like model with vocabulary 4 x width (64 = 4 x 16)."""

    def __init__(self, blocks):
        super().__init__()
        self.wte = torch.nn.Embedding(64, 16)
        self.blocks = blocks
        self.head = torch.nn.Linear(16, 64, bias=False)


@pytest.mark.parametrize("container", [torch.nn.ModuleList, torch.nn.Sequential])
def test_a_vocabulary_of_four_times_width_keeps_the_ffn(container):
    # 3 blocks with up 16->64 each, and the head 16->64: in a ModuleList the blocks are the
    # stack (the head is outside it); in a Sequential there is no block list, so the one
    # projection of the vocabulary's width beyond the blocks' is taken as the head
    blocks = [_Block(16) for _ in range(3)]
    model = _Tiny(container(blocks) if container is torch.nn.ModuleList else container(*blocks))
    d = describe(torch, model, 8)
    assert d["vocab"] == 64 and d["width"] == 16
    assert d["ffn"] == 64 and d["gated_mlp"] is False
    assert d["layers"] == (3 if container is torch.nn.ModuleList else None)
