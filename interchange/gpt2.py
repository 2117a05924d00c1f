"""armlm's causal, learned-position, pre-LN backbone as transformers' native `GPT2LMHeadModel`.

What maps one to one: token and position embeddings, each block's LayerNorms, fused QKV and output projection
(GPT-2's Conv1D holds the Linear's weight transposed), the MLP with exact GELU (`activation_function="gelu"`),
the final LayerNorm. What is folded:
- the token-type embedding: a language model always adds its row 0, so it goes into every position embedding;
- the LM-head bias b, which GPT-2's head lacks. The head's input is the final LayerNorm's output
  h = g * x_hat + beta, and x_hat always has mean zero, so u . h = u . beta (u = 1 / g) is the same constant c for
  every input. Hence W h + b = (W + b u^T / c) h exactly: the head becomes untied (`tie_word_embeddings=False`)
  with that rank-one change. Rounding of h reaches the logits through the added term (`fold_growth`, below), so
  export checks parity in fp32 and states the amplification in the model card.
What does not map: rotary positions, post-LN blocks, attention other than causal, a PLM's query stream, tokens
out of the support, and task heads (GPT-2's classification heads pool and project differently); those export
with armlm's own modelling file instead.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from transformers import GPT2Config, GPT2LMHeadModel

from armlm.common.errors import ArmlmError
from armlm.interchange.source import ExportSource

# The fold adds b_v u / c to head row v. Rounding of h reaches logit v through that row, so the fold multiplies a
# logit's rounding error by about the row's growth over the tied row it replaces (`fold_growth`). In fp32 that stays
# far below export's parity tolerance; in bf16 it does not (measured, docs/results/export-and-tests.md "Export parity": at a large
# growth the folded GPT-2 drifts far further from armlm's fp32 than armlm's own file). format=auto takes GPT-2 only
# below this growth; format=native takes it at any growth and says so in the card.
AUTO_FOLD_GROWTH = 2.0


def fold_terms(weights: dict[str, Tensor]) -> tuple[Tensor, float]:
    """(u = 1 / gain, c = u . beta) of the final LayerNorm, in float64: W h + b = (W + b u^T / c) h."""
    inverse_gain = 1.0 / weights["final_norm.weight"].double()
    return inverse_gain, float((weights["final_norm.bias"].double() * inverse_gain).sum())


def fold_growth(weights: dict[str, Tensor], lm_bias: Tensor) -> float:
    """max_v |b_v| ||u|| / |c| over the mean embedding row norm: how much longer the rank-one term is than the tied
    rows it is added to, the factor by which it scales rounding of h into the logits (0 for a zero bias, inf when
    the bias cannot be folded)."""
    bias = lm_bias.double()
    if not bool(bias.any()):
        return 0.0
    if bool((weights["final_norm.weight"].abs() < 1e-6).any()):
        return float("inf")
    inverse_gain, c = fold_terms(weights)
    if c == 0.0:
        return float("inf")
    row_norm = float(weights["token_embedding.weight"].double().norm(dim=1).mean())
    return float(bias.abs().max() * inverse_gain.norm() / abs(c) / row_norm)


def native_obstacles(source: ExportSource, largest_fold_growth: float = AUTO_FOLD_GROWTH) -> list[str]:
    """Every reason GPT2LMHeadModel cannot hold `source` exactly, or (past `largest_fold_growth`) not as well in
    half precision as armlm's own file does (empty: it maps)."""
    reasons = []
    if not source.is_causal_lm:
        reasons.append(f"the model is {source.architecture}, and GPT-2 is a causal LM")
    if source.lm_reader != "causal":
        reasons.append(f"its left-to-right logits come from a {source.lm_reader} reader, not causal attention")
    if source.model["positions"] != "learned":
        reasons.append(f"model.positions={source.model['positions']} (GPT-2 has learned positions)")
    if source.model["norm_position"] != "pre":
        reasons.append(f"model.norm_position={source.model['norm_position']} (GPT-2 is pre-LN)")
    if not source.mask_in_support:
        reasons.append("[MASK] is out of its support (GPT-2's logits cannot exclude a token)")
    if not reasons and source.lm_bias is not None:
        growth = fold_growth(source.weights, source.lm_bias)
        if growth > largest_fold_growth:
            reasons.append(f"its LM-head bias folds into GPT-2's head only with a term {growth:.1f} x the embedding "
                           "rows, so a bf16/fp16 load would carry about that many times armlm's rounding (exact in "
                           "fp32: format=native exports it anyway)")
    return reasons


def to_gpt2(source: ExportSource, bos_id: int, eos_id: int, pad_id: int) -> GPT2LMHeadModel:
    reasons = native_obstacles(source, largest_fold_growth=math.inf)
    if reasons:
        raise ArmlmError("GPT2LMHeadModel cannot express this checkpoint: " + "; ".join(reasons))
    w, m = source.weights, source.model
    config = GPT2Config(
        vocab_size=m["vocab_size"], n_positions=m["max_len"], n_embd=m["d_model"], n_layer=m["n_layers"],
        n_head=m["n_heads"], n_inner=m["d_ff"], activation_function="gelu", resid_pdrop=m["dropout"],
        embd_pdrop=m["dropout"], attn_pdrop=m["dropout"], layer_norm_epsilon=m["layer_norm_eps"],
        initializer_range=m["init_std"], bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id,
        tie_word_embeddings=False,
    )
    gpt2 = GPT2LMHeadModel(config)
    state = {
        "transformer.wte.weight": w["token_embedding.weight"],
        "transformer.wpe.weight": w["position_embedding.weight"] + w["type_embedding.weight"][0],
        "transformer.ln_f.weight": w["final_norm.weight"],
        "transformer.ln_f.bias": w["final_norm.bias"],
    }
    for i in range(m["n_layers"]):
        ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
        for a, b in (("norm1", "ln_1"), ("norm2", "ln_2")):
            for p in ("weight", "bias"):
                state[f"{theirs}{b}.{p}"] = w[f"{ours}{a}.{p}"]
        for a, b in (("attn.qkv", "attn.c_attn"), ("attn.proj", "attn.c_proj"), ("mlp.0", "mlp.c_fc"),
                     ("mlp.2", "mlp.c_proj")):
            state[f"{theirs}{b}.weight"] = w[f"{ours}{a}.weight"].t()
            state[f"{theirs}{b}.bias"] = w[f"{ours}{a}.bias"]
    head = w["token_embedding.weight"].double()
    if bool(source.lm_bias.any()):  # W h + b = (W + b u^T / c) h, u = 1 / gain, c = u . beta (module docstring)
        inverse_gain, c = fold_terms(w)
        head = head + torch.outer(source.lm_bias.double(), inverse_gain) / c
    state["lm_head.weight"] = head.to(w["token_embedding.weight"].dtype)
    missing, unexpected = gpt2.load_state_dict({k: v.contiguous() for k, v in state.items()}, strict=False)
    if unexpected or [k for k in missing if not k.endswith(".attn.bias")]:
        raise ArmlmError(f"GPT-2 mapping out of date with transformers: missing {missing}, unexpected {unexpected}")
    return gpt2.eval()
