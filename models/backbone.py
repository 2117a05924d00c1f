"""The one Transformer backbone shared by every objective.

The same weights run any attention pattern per call (models.attention: causal, bidirectional, prefix, or
an explicit mask), so an objective is only a choice of input corruption, attention, heads and loss. The LM
head is tied to the token embedding and lives here because every language-modelling objective shares it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import IGNORE_INDEX
from armlm.models.attention import Attention, attend, attention_share, sdpa_arguments
from armlm.models.flops import forward_flops
from armlm.models.lm_loss import linear_cross_entropy, matmul_dtype, weighted_linear_cross_entropy
from armlm.models.rotary import Rotary
from armlm.models.rows import every_row, take

NORM_POSITIONS = ("pre", "post")
POSITION_KINDS = ("learned", "rope")


@dataclass
class ModelConfig:
    vocab_size: int = 8192
    max_len: int = 512
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    type_vocab_size: int = 2
    norm_position: str = "pre"  # "pre" (GPT-2 style) or "post" (BERT style)
    positions: str = "learned"  # "learned" absolute embeddings or "rope" rotary
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.norm_position not in NORM_POSITIONS:
            raise ArmlmError(f"model.norm_position={self.norm_position!r}; choose one of {NORM_POSITIONS}")
        if self.positions not in POSITION_KINDS:
            raise ArmlmError(f"model.positions={self.positions!r}; choose one of {POSITION_KINDS}")
        for name in ("vocab_size", "max_len", "d_model", "n_layers", "n_heads", "d_ff", "type_vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArmlmError(f"model.{name}={value!r} must be a positive integer")
        for name in ("dropout", "layer_norm_eps", "init_std"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ArmlmError(f"model.{name}={value!r} must be a number")
        if not self.layer_norm_eps > 0 or not self.init_std > 0:
            raise ArmlmError(f"model.layer_norm_eps={self.layer_norm_eps} and model.init_std={self.init_std} "
                             "must be > 0")
        if self.d_model % self.n_heads:
            raise ArmlmError(f"model.d_model={self.d_model} must be divisible by model.n_heads={self.n_heads}")
        if self.positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise ArmlmError("rope needs an even head dimension (model.d_model / model.n_heads)")
        if not 0.0 <= self.dropout < 1.0:
            raise ArmlmError(f"model.dropout must be in [0, 1), got {self.dropout}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout
        self.rotary = Rotary(cfg.d_model // cfg.n_heads, cfg.max_len) if cfg.positions == "rope" else None

    def forward(self, x: Tensor, *, mask: Tensor | None, is_causal: bool, position_ids: Tensor | None = None) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.rotary is not None:
            q, k = self.rotary(q, position_ids), self.rotary(k, position_ids)
        dropout = self.dropout if self.training else 0.0
        # sdpa_arguments gives a mask or is_causal, never both: without a dense mask SDPA picks its fastest kernel.
        y = attend(q, k, v, mask=mask, is_causal=is_causal, dropout=dropout)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.pre_norm = cfg.norm_position == "pre"
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.attn = SelfAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model), nn.Dropout(cfg.dropout)
        )
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, *, mask: Tensor | None, is_causal: bool, keep: Tensor | None = None,
                position_ids: Tensor | None = None, kept: int | None = None) -> Tensor:
        """`keep` (B, T) bool: after attention, go on with those positions only, as rows (N, d) (models.rows.take:
        every row in a compiled step, unless `kept` says how many)."""
        if self.pre_norm:
            x = x + self.drop(self.attn(self.norm1(x), mask=mask, is_causal=is_causal, position_ids=position_ids))
            x = x if keep is None else take(x, keep, count=kept)
            return x + self.mlp(self.norm2(x))
        x = self.norm1(x + self.drop(self.attn(x, mask=mask, is_causal=is_causal, position_ids=position_ids)))
        x = x if keep is None else take(x, keep, count=kept)
        return self.norm2(x + self.mlp(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        # Active `recording_targets` lists and the open `target_scope` names (plain state: never saved).
        self._target_recorders: list[list[tuple[str, Tensor]]] = []
        self._target_scopes: list[str] = []
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position_embedding = nn.Embedding(cfg.max_len, cfg.d_model) if cfg.positions == "learned" else None
        self.type_embedding = nn.Embedding(cfg.type_vocab_size, cfg.d_model)
        post = cfg.norm_position == "post"
        # BERT normalises the embeddings; pre-LN models normalise once after the last block instead.
        self.embedding_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if post else nn.Identity()
        self.final_norm = nn.Identity() if post else nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.lm_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.apply(self._init_weights)
        # GPT-2: scale the residual output projections so the residual stream does not grow with depth.
        for block in self.blocks:
            for proj in (block.attn.proj, block.mlp[2]):
                nn.init.normal_(proj.weight, std=cfg.init_std / math.sqrt(2 * cfg.n_layers))

    def set_dropout(self, p: float) -> Transformer:
        """Every dropout of the model at rate `p`, in place (fine-tuning trains at its own rate, the weights as they
        are: no second model is built), and the config that records it."""
        self.config = replace(self.config, dropout=float(p))  # ModelConfig checks the rate
        for module in self.modules():
            if isinstance(module, nn.Dropout):
                module.p = float(p)
            elif isinstance(module, SelfAttention):
                module.dropout = float(p)
        return self

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: Tensor,
        *,
        attention: Attention,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        output_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_count: int | None = None,
    ) -> Tensor:
        """Hidden states (B, T, d). `attention` says which positions each one sees (models.attention);
        `attention_mask` is 1 for real tokens and 0 for padding, which is never attended.

        With `output_mask` ((B, T) bool) only those positions' states come back, as rows (N, d) in row-major
        order, and the last block's MLP runs only there: an MLM that scores 15 % of the positions skips 85 %
        of that MLP's work (the other layers still need every position as a key and value).

        `position_ids` ((B, T), default 0..T-1 in every row): the position each input row stands at, so one call
        can carry two rows at one position (XLNet's content and query streams, objectives.plm). `output_count`: how
        many positions `output_mask` holds, where the caller knows it from the shapes (models.rows.take)."""
        return self._run(input_ids, attention, attention_mask, token_type_ids, keep_layers=False,
                         output_mask=output_mask, position_ids=position_ids, output_count=output_count)[-1]

    def layer_states(
        self,
        input_ids: Tensor,
        *,
        attention: Attention,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        with_embeddings: bool = False,
    ) -> list[Tensor]:
        """Every block's output (n_layers tensors of (B, T, d)), the last equal to `forward`'s. Each goes
        through the final norm, so a pre-LN model's intermediate layers are on the same scale as its last.
        `with_embeddings` puts the embedding layer's output first (ELMo's layer 0, the context-free one)."""
        return self._run(input_ids, attention, attention_mask, token_type_ids, keep_layers=True,
                         with_embeddings=with_embeddings)

    def _run(self, input_ids: Tensor, attention: Attention, attention_mask: Tensor | None,
             token_type_ids: Tensor | None, *, keep_layers: bool, output_mask: Tensor | None = None,
             position_ids: Tensor | None = None, with_embeddings: bool = False,
             output_count: int | None = None) -> list[Tensor]:
        t = input_ids.shape[1]
        if position_ids is None and t > self.config.max_len:
            raise ArmlmError(f"sequence length {t} exceeds model.max_len={self.config.max_len}")
        if position_ids is not None and (position_ids.shape != input_ids.shape or (
                not every_row() and int(position_ids.max()) >= self.config.max_len)):
            raise ArmlmError(f"position_ids {tuple(position_ids.shape)} must match the inputs "
                             f"{tuple(input_ids.shape)} and stay below model.max_len={self.config.max_len}")
        x = self.embed(input_ids, token_type_ids, position_ids)
        mask, is_causal = sdpa_arguments(attention, attention_mask, input_ids.shape[0], t, input_ids.device)
        states = [x] if with_embeddings else []  # already normalised by embedding_norm
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = block(x, mask=mask, is_causal=is_causal, keep=output_mask if i == last else None,
                      position_ids=position_ids, kept=output_count)
            if keep_layers or i == last:
                states.append(self.final_norm(x))
        return states

    def embed(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
              position_ids: Tensor | None = None) -> Tensor:
        """(B, T, d): what the first block reads (token, type and position embeddings, normalised where the model
        normalises them, dropout). ELECTRA's generator reads these too: the two networks share their embeddings."""
        t = input_ids.shape[1]
        # Type and position embeddings are summed first, so the (B, T, d) token embeddings take one add.
        offset = self.type_embedding.weight[0] if token_type_ids is None else self.type_embedding(token_type_ids)
        if self.position_embedding is not None:
            positions = self.position_embedding.weight[:t] if position_ids is None else self.position_embedding(
                position_ids)
            offset = offset + positions
        return self.drop(self.embedding_norm(self.token_embedding(input_ids) + offset))

    def logits(self, hidden: Tensor) -> Tensor:
        """Vocabulary logits through the LM head tied to the token embedding; any leading shape."""
        return F.linear(hidden, self.token_embedding.weight, self.lm_bias)

    @contextmanager
    def recording_targets(self) -> Iterator[list[tuple[str, Tensor]]]:
        """Collects (scope, targets) for every call of the LM head inside the block: the tokens an objective's
        loss scored, whatever the objective. Every objective scores its targets through `lm_nll` or
        `weighted_lm_nll` (or declares them, `record_targets`), so this is how validation knows the unigram NLL of exactly those targets (the gate)."""
        recorded: list[tuple[str, Tensor]] = []
        self._target_recorders.append(recorded)
        try:
            yield recorded
        finally:
            self._target_recorders.remove(recorded)

    @contextmanager
    def target_scope(self, name: str) -> Iterator[None]:
        """Targets scored inside the block are recorded under `name` (a mixture's component, say)."""
        self._target_scopes.append(name)
        try:
            yield
        finally:
            self._target_scopes.pop()

    def record_targets(self, targets: Tensor) -> None:
        """Declares `targets` scored by a loss that does not go through `lm_nll` (All-Tokens MLM's copy mixture), so
        the learning gate's unigram baseline covers them."""
        for recorded in self._target_recorders:
            recorded.append(("/".join(self._target_scopes), targets[targets != IGNORE_INDEX].detach()))

    def lm_nll(self, hidden: Tensor, targets: Tensor, *, excluded: int | None = None) -> Tensor:
        """Summed NLL (fp32) of `targets` (N,) at hidden states (N, d) under the tied LM head, without ever
        holding the N x V logits (models.lm_loss); every target must be a real token id. `excluded`: a token
        out of the support (masked diffusion's [MASK])."""
        self.record_targets(targets)
        return linear_cross_entropy(hidden, self.token_embedding.weight, self.lm_bias, targets, excluded=excluded)

    def weighted_lm_nll(self, hidden: Tensor, targets: Tensor, row_weights: Tensor | None, *,
                        excluded: int | None = None) -> tuple[Tensor, Tensor]:
        """(sum of row_weights x each row's NLL, with gradients; the plain summed NLL, without), in one pass."""
        self.record_targets(targets)
        return weighted_linear_cross_entropy(hidden, self.token_embedding.weight, self.lm_bias, targets,
                                             row_weights, excluded=excluded)

    def forward_flops(self, input_ids: Tensor, attention: Attention, *, attention_mask: Tensor | None = None,
                      output_rows: int | None = None, vocab_rows: int = 0) -> float:
        """Matmul FLOPs of `forward` on these inputs (its last MLP on `output_rows` rows, default every
        position) plus the LM head on `vocab_rows` rows, as models.flops counts them, with the share of attention
        scores the chosen kernel computes (models.attention.attention_share). Call it where the step runs (under
        its autocast), as the objectives' losses do: the kernel depends on the matmul dtype."""
        sequences, length = input_ids.shape
        c = self.config
        device = input_ids.device.type
        share = attention_share(attention, attention_mask, device_type=device,
                                dtype=matmul_dtype(device, self.token_embedding.weight.dtype), length=length,
                                dropout=c.dropout if self.training else 0.0)
        return forward_flops(d_model=c.d_model, n_layers=c.n_layers, d_ff=c.d_ff, vocab_size=c.vocab_size,
                             sequences=sequences, length=length,
                             output_rows=sequences * length if output_rows is None else int(output_rows),
                             vocab_rows=int(vocab_rows), attention_share=share)

    def num_parameters(self, *, exclude_embeddings: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            n -= self.token_embedding.weight.numel()
            if self.position_embedding is not None:
                n -= self.position_embedding.weight.numel()
        return n
