"""ELECTRA's generator (Clark et al. 2020, §3.2) and the corruption it drives: a narrow bidirectional masked LM that
reads the backbone's own embeddings, fills the masked positions with its samples, and is discarded after
pretraining. Every objective of ELECTRA's efficiency analysis (objectives.electra) trains one beside the backbone."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from armlm.common.errors import ArmlmError
from armlm.common.vocabulary import Vocabulary
from armlm.models.attention import Attention, attention_share, sdpa_arguments
from armlm.models.backbone import Block, ModelConfig, Transformer
from armlm.models.flops import forward_flops, linear_flops
from armlm.models.lm_loss import matmul_dtype
from armlm.models.rows import flops_rows, put, take
from armlm.objectives.base import IGNORE_INDEX, NOT_A_LANGUAGE_MODEL, Batch, Objective
from armlm.objectives.mlm import MaskedLM

HEAD_WIDTH = 64  # ELECTRA's generator keeps BERT's 64-wide heads: max(1, width // 64) of them


class Generator(nn.Module):
    """A Transformer `width_fraction` as wide as the backbone, as deep, with 4x-wide MLPs. It reads the backbone's
    embeddings through a projection (ELECTRA's embeddings_project) and predicts through the backbone's tied token
    embedding (a dense + GELU + LayerNorm back to the backbone's width first) with an output bias of its own, so the
    two networks share their embeddings and nothing else, as the paper's do. The bias is made once the vocabulary
    is known (`set_vocabulary_size`), before the optimiser and any checkpoint restore."""

    def __init__(self, *, d_model: int, n_layers: int, width_fraction: float, max_len: int, positions: str,
                 norm_position: str, dropout: float, layer_norm_eps: float, init_std: float) -> None:
        super().__init__()
        if not 0 < width_fraction <= 1:
            raise ArmlmError(f"objective.generator_fraction={width_fraction} must be in (0, 1] (ELECTRA: 1/4 to 1/3)")
        width = max(2, round(d_model * width_fraction))
        heads = max(1, width // HEAD_WIDTH)
        width -= width % (2 * heads)  # whole heads of an even width (rotary positions rotate pairs)
        self.config = ModelConfig(d_model=width, n_layers=n_layers, n_heads=heads, d_ff=4 * width, max_len=max_len,
                                  positions=positions, norm_position=norm_position, dropout=dropout,
                                  layer_norm_eps=layer_norm_eps, init_std=init_std)
        self.project_in = nn.Linear(d_model, width)
        self.blocks = nn.ModuleList(Block(self.config) for _ in range(n_layers))
        post = norm_position == "post"
        self.final_norm = nn.Identity() if post else nn.LayerNorm(width, eps=layer_norm_eps)
        self.head = nn.Sequential(nn.Linear(width, d_model), nn.GELU(), nn.LayerNorm(d_model, eps=layer_norm_eps))
        self.register_parameter("output_bias", None)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=init_std)
                nn.init.zeros_(module.bias)

    def set_vocabulary_size(self, size: int) -> None:
        if self.output_bias is None or self.output_bias.numel() != size:
            self.output_bias = nn.Parameter(torch.zeros(size, device=self.project_in.weight.device))

    def forward(self, model: Transformer, input_ids: Tensor, attention: Attention, attention_mask: Tensor | None,
                token_type_ids: Tensor | None, output_mask: Tensor) -> Tensor:
        """Logits (N, V) at the `output_mask` positions, row-major, from the generator reading `input_ids` under
        `attention` (bidirectional, within documents where the discriminator's is)."""
        x = self.project_in(model.embed(input_ids, token_type_ids))
        mask, is_causal = sdpa_arguments(attention, attention_mask, input_ids.shape[0], input_ids.shape[1],
                                         input_ids.device)
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = block(x, mask=mask, is_causal=is_causal, keep=output_mask if i == last else None)
        if self.output_bias is None:
            raise RuntimeError("the generator's vocabulary is unknown: call the objective's set_vocabulary first")
        return F.linear(self.head(self.final_norm(x)), model.token_embedding.weight, self.output_bias)

    def forward_flops(self, model: Transformer, input_ids: Tensor, attention: Attention,
                      attention_mask: Tensor | None, output_rows: int) -> float:
        """Matmul FLOPs of `forward` (models.flops): the projection in at every position, the blocks (the last
        MLP on the output rows), the head and the tied vocabulary projection on the output rows."""
        sequences, length = input_ids.shape
        c, device = self.config, input_ids.device.type
        share = attention_share(attention, attention_mask, device_type=device, length=length,
                                dtype=matmul_dtype(device, self.project_in.weight.dtype),
                                dropout=c.dropout if self.training else 0.0)
        blocks = forward_flops(d_model=c.d_model, n_layers=c.n_layers, d_ff=c.d_ff, vocab_size=0, sequences=sequences,
                               length=length, output_rows=output_rows, vocab_rows=0, attention_share=share)
        vocabulary = 2.0 * output_rows * model.config.d_model * model.config.vocab_size
        return (blocks + linear_flops(self.project_in, sequences * length) + linear_flops(self.head, output_rows)
                + vocabulary)


def sample_rows(logits: Tensor, uniforms: Tensor) -> Tensor:
    """One token per row of `logits` (N, V), drawn from its softmax by inverting the row's CDF at `uniforms` (N,),
    uniforms on [0, 1), without a gradient."""
    with torch.no_grad():
        cdf = torch.softmax(logits.detach().float(), dim=-1).cumsum(dim=-1)
        return torch.searchsorted(cdf, uniforms[:, None], right=True).squeeze(1).clamp(max=cdf.shape[-1] - 1)


class Replaced(NamedTuple):
    """One batch corrupted by the generator (GeneratorCorruption.replace)."""

    inputs: Tensor  # (B, T): the original ids with every selected position holding the generator's sample
    selected: Tensor  # (B, T) bool: the positions the generator filled (BERT's 15 %)
    replaced: Tensor  # (B, T) bool: where the sample differs from the original (a correct sample is "original")
    generator_loss: Tensor  # the generator's mean masked-LM NLL over the selected positions
    generator_nll_sum: Tensor  # its sum, detached
    n_selected: Tensor
    forward_flops: float  # the generator's


class GeneratorCorruption(Objective):
    """What ELECTRA and its ablations share: BERT's selection of `mask_rate` of the ordinary positions, ELECTRA's
    generator input ([MASK] at `mask_prob` of them, the original token at the rest), and the generator's samples in
    their place. Samples are drawn from its softmax at temperature 1 without a gradient: the backbone's loss never
    reaches the generator except through the embeddings they share."""

    pretraining_attention = "bidirectional"
    finetune_attention = "bidirectional"
    # A discriminator, or a network trained on generator-corrupted text, is not a language model armlm can score:
    # it never saw [MASK] (no masked conditionals) and has no left-to-right factors.
    scoring = NOT_A_LANGUAGE_MODEL
    masked_conditionals = False
    reference = "Clark et al. 2020 (ELECTRA)"

    def __init__(self, *, d_model: int, n_layers: int, max_len: int, positions: str, norm_position: str,
                 dropout: float, layer_norm_eps: float, init_std: float, generator_fraction: float = 0.25,
                 mask_rate: float = 0.15, mask_prob: float = 0.85, discriminator_weight: float = 1.0) -> None:
        """`discriminator_weight`: the backbone's loss's weight beside the generator's (ELECTRA's lambda: 50)."""
        super().__init__()
        if not discriminator_weight > 0:
            raise ArmlmError(f"objective.discriminator_weight={discriminator_weight} must be > 0 (ELECTRA: 50)")
        self.discriminator_weight = float(discriminator_weight)
        # ELECTRA's masking: [MASK] or the original token, never a random one
        self.masking = MaskedLM(mask_rate=mask_rate, mask_prob=mask_prob, random_prob=0.0, keep_prob=1.0 - mask_prob)
        self.generator = Generator(d_model=d_model, n_layers=n_layers, width_fraction=generator_fraction,
                                   max_len=max_len, positions=positions, norm_position=norm_position, dropout=dropout,
                                   layer_norm_eps=layer_norm_eps, init_std=init_std)

    def set_vocabulary(self, vocab: Vocabulary) -> None:
        self.masking.set_vocabulary(vocab)
        self.generator.set_vocabulary_size(vocab.size)

    def replace(self, batch: Batch, model: Transformer, generator: torch.Generator | None) -> Replaced:
        input_ids = batch["input_ids"]
        masked, labels = self.masking.corrupt(input_ids, generator)
        selected = labels != IGNORE_INDEX
        attention = self.attention(batch)
        logits = self.generator(model, masked, attention, batch.get("attention_mask"), batch.get("token_type_ids"),
                                selected)
        targets = take(labels, selected, IGNORE_INDEX)
        nll_sum = F.cross_entropy(logits.float(), targets, reduction="sum", ignore_index=IGNORE_INDEX)
        n_selected = selected.sum()
        # One uniform per position, drawn for every position and read at the chosen rows, inverts each row's CDF:
        # the samples of an eager step (the selected rows) and of a compiled one (every row) are then the same.
        uniforms = take(torch.rand(input_ids.shape, generator=generator, device=input_ids.device), selected, 0.0)
        inputs = put(sample_rows(logits, uniforms), selected, input_ids)
        flops = self.generator.forward_flops(model, masked, attention, batch.get("attention_mask"),
                                             flops_rows(selected))
        return Replaced(inputs, selected, inputs != input_ids, nll_sum / n_selected.clamp(min=1), nll_sum.detach(),
                        n_selected, flops)

    def read_replaced(self, batch: Batch, model: Transformer, corrupted: Replaced,
                      positions: Tensor) -> tuple[Tensor, float]:
        """The backbone over the generator-corrupted inputs, under this objective's attention: its states at
        `positions` ((B, T) bool; rows (N, d), row-major) and the FLOPs of that pass (no vocabulary rows: each
        objective adds its own heads)."""
        attention = self.attention(batch)
        states = model(corrupted.inputs, attention=attention, attention_mask=batch.get("attention_mask"),
                       token_type_ids=batch.get("token_type_ids"), output_mask=positions)
        return states, model.forward_flops(corrupted.inputs, attention, attention_mask=batch.get("attention_mask"),
                                           output_rows=flops_rows(positions))
