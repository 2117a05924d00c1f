"""armlm's Transformer for Hugging Face transformers, loaded with `trust_remote_code=True`.

This file is copied into every exported folder and imports only torch and transformers, never armlm. Its module
tree and parameter names are armlm's backbone's under `armlm.` (the LM-head bias as `lm_bias`, fine-tuning heads
under `head.`), so an armlm state dict loads unchanged and the outputs equal armlm's to float rounding.

How each class reads the backbone:
- `ArmlmForCausalLM`: next-token logits the way the objective reads left to right: the causal backbone
  (`lm_reader="causal"`), or XLNet's query stream in the identity order (`lm_reader="query_stream"`, a PLM).
- `ArmlmForMaskedLM`: every position's logits with bidirectional attention (MLM, masked diffusion).
- `ArmlmModel`, `ArmlmForSequenceClassification`, `ArmlmForTokenClassification`: `config.attention` (the
  attention the model was or would be fine-tuned with).
Tokens out of the objective's support (`excluded_token_ids`, e.g. masked diffusion's [MASK]) get the lowest
logit, so a pipeline never proposes them; every other logit is armlm's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutput,
    CausalLMOutput,
    MaskedLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

ATTENTIONS = ("causal", "bidirectional")
NORM_POSITIONS = ("pre", "post")
POSITION_KINDS = ("learned", "rope")
LM_READERS = ("causal", "query_stream")
POOLINGS = ("first", "last", "mean")


class ArmlmConfig(PretrainedConfig):
    model_type = "armlm"
    attribute_map = {"hidden_size": "d_model", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
                     "intermediate_size": "d_ff", "max_position_embeddings": "max_len"}

    def __init__(self, vocab_size: int = 8192, max_len: int = 512, d_model: int = 256, n_layers: int = 4,
                 n_heads: int = 4, d_ff: int = 1024, dropout: float = 0.1, type_vocab_size: int = 2,
                 norm_position: str = "pre", positions: str = "learned", layer_norm_eps: float = 1e-5,
                 init_std: float = 0.02, attention: str = "bidirectional", lm_reader: str = "causal",
                 start_token_id: int | None = None, excluded_token_ids: list[int] | None = None,
                 pooling: str = "first", feature_layers: int = 1, head_dropout: float = 0.1, **kwargs) -> None:
        for name, value, choices in (("attention", attention, ATTENTIONS), ("lm_reader", lm_reader, LM_READERS),
                                     ("pooling", pooling, POOLINGS), ("norm_position", norm_position, NORM_POSITIONS),
                                     ("positions", positions, POSITION_KINDS)):
            if value not in choices:
                raise ValueError(f"{name}={value!r}; choose one of {choices}")
        if lm_reader == "query_stream" and start_token_id is None:
            raise ValueError("lm_reader='query_stream' needs start_token_id (the query stream's input token)")
        self.vocab_size, self.max_len, self.d_model, self.n_layers = vocab_size, max_len, d_model, n_layers
        self.n_heads, self.d_ff, self.dropout, self.type_vocab_size = n_heads, d_ff, dropout, type_vocab_size
        self.norm_position, self.positions, self.layer_norm_eps = norm_position, positions, layer_norm_eps
        self.init_std, self.attention, self.lm_reader, self.start_token_id = init_std, attention, lm_reader, start_token_id
        self.excluded_token_ids = list(excluded_token_ids or [])
        self.pooling, self.feature_layers, self.head_dropout = pooling, feature_layers, head_dropout
        kwargs.setdefault("tie_word_embeddings", False)  # the LM head reads the embedding directly: nothing to tie
        super().__init__(**kwargs)


def rotate(x: Tensor, position_ids: Tensor) -> Tensor:
    """Rotary embedding, rotate-half form, base 10000; x (B, H, T, hd), position_ids (B, T)."""
    hd = x.shape[-1]
    inv_freq = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd)
    angles = position_ids.to(torch.float32)[..., None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)[:, None]
    x1, x2 = x.chunk(2, dim=-1)
    return x * angles.cos().to(x.dtype) + torch.cat([-x2, x1], dim=-1) * angles.sin().to(x.dtype)


class SelfAttention(nn.Module):
    def __init__(self, config: ArmlmConfig) -> None:
        super().__init__()
        self.n_heads, self.rope, self.dropout = config.n_heads, config.positions == "rope", config.dropout
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: Tensor, allowed: Tensor, position_ids: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.rope:
            q, k = rotate(q, position_ids), rotate(k, position_ids)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None],
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, config: ArmlmConfig) -> None:
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.norm1 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.attn = SelfAttention(config)
        self.norm2 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, config.d_ff), nn.GELU(),
                                 nn.Linear(config.d_ff, config.d_model), nn.Dropout(config.dropout))
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, allowed: Tensor, position_ids: Tensor) -> Tensor:
        if self.pre_norm:
            x = x + self.drop(self.attn(self.norm1(x), allowed, position_ids))
            return x + self.mlp(self.norm2(x))
        x = self.norm1(x + self.drop(self.attn(x, allowed, position_ids)))
        return self.norm2(x + self.mlp(x))


class Backbone(nn.Module):
    """armlm's `models.backbone.Transformer`, attention given per call as a (B, T, T) boolean mask."""

    def __init__(self, config: ArmlmConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = nn.Embedding(config.max_len, config.d_model) if config.positions == "learned" else None
        self.type_embedding = nn.Embedding(config.type_vocab_size, config.d_model)
        post = config.norm_position == "post"
        self.embedding_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if post else nn.Identity()
        self.final_norm = nn.Identity() if post else nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))

    def forward(self, input_ids: Tensor, allowed: Tensor, token_type_ids: Tensor | None = None,
                position_ids: Tensor | None = None) -> list[Tensor]:
        """Every block's output through the final norm (the last is the model's hidden state)."""
        b, t = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(t, device=input_ids.device).expand(b, t)
        # A row that may read nothing (a left pad under causal attention) reads itself: never an all-masked softmax.
        allowed = allowed | (torch.eye(t, dtype=torch.bool, device=allowed.device) & ~allowed.any(-1, keepdim=True))
        if int(position_ids.max()) >= self.config.max_len:
            raise ValueError(f"positions up to {int(position_ids.max())} exceed max_len={self.config.max_len}")
        types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        x = self.token_embedding(input_ids) + self.type_embedding(types)
        if self.position_embedding is not None:
            x = x + self.position_embedding(position_ids)
        x = self.drop(self.embedding_norm(x))
        states = []
        for block in self.blocks:
            x = block(x, allowed, position_ids)
            states.append(self.final_norm(x))
        return states


def positions_of(input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
    """Each token's position counted over real tokens only, so a left-padded prompt (batched generate()) gets the
    positions armlm gives it unpadded; with right padding (armlm's own) these are 0..T-1 on every real token."""
    if attention_mask is None:
        return torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def attention_mask_of(kind: str, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
    """(B, T, T) bool: query row r may read key s. Padding (attention_mask 0) is never read."""
    b, t = input_ids.shape
    allowed = torch.ones(b, t, t, dtype=torch.bool, device=input_ids.device)
    if kind == "causal":
        allowed = allowed.tril()
    if attention_mask is not None:
        allowed = allowed & attention_mask.bool()[:, None, :]
    return allowed


def pool(hidden: Tensor, attention_mask: Tensor, how: str) -> Tensor:
    """armlm's models.heads.pool: the first token, the last non-pad token (right padding) or the mean."""
    if how == "first":
        return hidden[:, 0]
    if how == "last":
        last = attention_mask.long().sum(dim=1) - 1
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    mask = attention_mask.to(hidden.dtype)
    return (hidden * mask[..., None]).sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp(min=1)


class ArmlmPreTrainedModel(PreTrainedModel):
    config_class = ArmlmConfig
    base_model_prefix = "armlm"
    _supports_sdpa = True

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.armlm.token_embedding

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.armlm.token_embedding = value


class ArmlmModel(ArmlmPreTrainedModel):
    """The backbone's hidden states with `config.attention`; `hidden_states` holds every block's output."""

    def __init__(self, config: ArmlmConfig) -> None:
        super().__init__(config)
        self.armlm = Backbone(config)
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                output_hidden_states: bool | None = None, **kwargs) -> BaseModelOutput:
        allowed = attention_mask_of(self.config.attention, input_ids, attention_mask)
        states = self.armlm(input_ids, allowed, token_type_ids, positions_of(input_ids, attention_mask))
        return BaseModelOutput(last_hidden_state=states[-1], hidden_states=tuple(states) if output_hidden_states else None)


class LanguageModel(ArmlmPreTrainedModel):
    """The backbone plus armlm's LM head: the token embedding, tied, and a bias."""

    def __init__(self, config: ArmlmConfig) -> None:
        super().__init__(config)
        self.armlm = Backbone(config)
        self.lm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.post_init()

    def logits(self, hidden: Tensor) -> Tensor:
        logits = F.linear(hidden, self.armlm.token_embedding.weight, self.lm_bias)
        if self.config.excluded_token_ids:
            logits[..., self.config.excluded_token_ids] = torch.finfo(logits.dtype).min
        return logits


class ArmlmForCausalLM(LanguageModel, GenerationMixin):
    """Logits at row t predict token t + 1. No key-value cache: every step re-reads the whole sequence."""

    def next_token_states(self, input_ids: Tensor, attention_mask: Tensor | None,
                          token_type_ids: Tensor | None = None) -> Tensor:
        b, t = input_ids.shape
        positions = positions_of(input_ids, attention_mask)
        causal = attention_mask_of("causal", input_ids, attention_mask)
        if self.config.lm_reader == "causal":
            return self.armlm(input_ids, causal, token_type_ids, positions)[-1]
        # XLNet's query stream in the identity order: after each token r a query row at position r + 1, its input
        # the start token, reading the content (causal) stream up to r; no row reads a query row.
        if int(positions.max()) + 1 >= self.config.max_len:
            raise ValueError(f"the query stream of a {t}-token input reaches position {int(positions.max()) + 1}; "
                             f"max_len={self.config.max_len}")
        allowed = torch.zeros(b, 2 * t, 2 * t, dtype=torch.bool, device=input_ids.device)
        allowed[:, :t, :t] = causal
        allowed[:, t:, :t] = causal
        ids = torch.cat([input_ids, torch.full_like(input_ids, self.config.start_token_id)], dim=1)
        types = None if token_type_ids is None else torch.cat([token_type_ids, torch.zeros_like(token_type_ids)], 1)
        return self.armlm(ids, allowed, types, torch.cat([positions, positions + 1], dim=1))[-1][:, t:]

    def refuse_doubled_start(self, input_ids: Tensor, attention_mask: Tensor | None) -> None:
        """armlm starts every text with one [CLS] and the tokenizer adds it; a caller that prepends its own BOS as
        well (lm-eval's `hf` loglikelihood_rolling) would score the tokenizer's [CLS] as a word, log p([CLS] | [CLS])."""
        bos = self.config.bos_token_id
        if bos is None or input_ids.shape[1] < 2:
            return
        positions = positions_of(input_ids, attention_mask)
        first, second = input_ids[positions == 0], input_ids[positions == 1]
        if len(first) == len(second) and bool(((first == bos) & (second == bos)).any()):
            raise ValueError("the input starts with [CLS] [CLS]: the tokenizer already begins every text with [CLS] "
                             "and the caller added another. With lm-evaluation-harness's hf backend pass "
                             "add_bos_token=False for loglikelihood_rolling tasks (perplexity), or use armlm's own "
                             "`armlm harness --model armlm`")

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, **kwargs) -> CausalLMOutput:
        self.refuse_doubled_start(input_ids, attention_mask)
        logits = self.logits(self.next_token_states(input_ids, attention_mask, token_type_ids))
        loss = None
        if labels is not None:  # the transformers convention: labels are the inputs, shifted here
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                                      **kwargs) -> dict[str, Tensor | None]:
        """The whole sequence every step (no cache); positions come from the attention mask (left padding)."""
        return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": kwargs.get("token_type_ids")}

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False


class ArmlmForMaskedLM(LanguageModel):
    """Every position's logits given all the others (bidirectional attention)."""

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, **kwargs) -> MaskedLMOutput:
        hidden = self.armlm(input_ids, attention_mask_of("bidirectional", input_ids, attention_mask), token_type_ids,
                            positions_of(input_ids, attention_mask))[-1]
        logits = self.logits(hidden)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                                                           ignore_index=-100)
        return MaskedLMOutput(loss=loss, logits=logits)


class ArmlmForSequenceClassification(ArmlmPreTrainedModel):
    """armlm's ClassificationHead (BERT's dense + tanh pooler, then a linear layer) on the pooled state; one label
    is regression."""

    def __init__(self, config: ArmlmConfig) -> None:
        super().__init__(config)
        self.armlm = Backbone(config)
        d = config.d_model
        self.head = nn.Module()
        self.head.pool = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Dropout(config.head_dropout))
        self.head.classifier = nn.Linear(d, config.num_labels)
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, **kwargs) -> SequenceClassifierOutput:
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        hidden = self.armlm(input_ids, attention_mask_of(self.config.attention, input_ids, mask), token_type_ids,
                            positions_of(input_ids, mask))[-1]
        logits = self.head.classifier(self.head.pool(pool(hidden, mask, self.config.pooling)))
        loss = None
        if labels is not None:
            loss = (F.mse_loss(logits.squeeze(-1).float(), labels.float()) if self.config.num_labels == 1
                    else F.cross_entropy(logits.float(), labels))
        return SequenceClassifierOutput(loss=loss, logits=logits)


class ArmlmForTokenClassification(ArmlmPreTrainedModel):
    """armlm's TaggingHead over the last `feature_layers` blocks' states (one: BERT's linear tagger)."""

    def __init__(self, config: ArmlmConfig) -> None:
        super().__init__(config)
        self.armlm = Backbone(config)
        d, n, p = config.d_model, config.feature_layers, config.head_dropout
        hidden = [nn.Linear(d * n, d), nn.GELU(), nn.Dropout(p)] if n > 1 else []
        self.head = nn.Module()
        self.head.net = nn.Sequential(nn.Dropout(p), *hidden, nn.Linear(d, config.num_labels))
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, **kwargs) -> TokenClassifierOutput:
        states = self.armlm(input_ids, attention_mask_of(self.config.attention, input_ids, attention_mask),
                            token_type_ids, positions_of(input_ids, attention_mask))
        logits = self.head.net(torch.cat(states[-self.config.feature_layers:], dim=-1))
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                                                           ignore_index=-100)
        return TokenClassifierOutput(loss=loss, logits=logits)


AUTO_MAP = {"AutoConfig": "ArmlmConfig", "AutoModel": "ArmlmModel", "AutoModelForCausalLM": "ArmlmForCausalLM",
            "AutoModelForMaskedLM": "ArmlmForMaskedLM",
            "AutoModelForSequenceClassification": "ArmlmForSequenceClassification",
            "AutoModelForTokenClassification": "ArmlmForTokenClassification"}
