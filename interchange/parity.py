"""armlm's own outputs for an exported checkpoint, and how far an exported model's are from them.

The reference is computed by armlm's modules, not by a re-implementation: the backbone with the objective's
left-to-right reader (`Objective.next_token_states`) or bidirectional attention, and the fine-tuning module for
task heads. Padding is right padding; only real tokens' rows are compared."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import Tensor
from transformers import AutoModelForCausalLM, pipeline

from armlm.common.errors import ArmlmError
from armlm.common.migrations import migrate_finetune_hparams
from armlm.common.vocabulary import EOD, MASK
from armlm.datamodules.encoding import token_id
from armlm.finetune.module import FinetuneModule
from armlm.generation.decode import Request, left_to_right
from armlm.generation.run import banned_tokens, encode_prompt
from armlm.generation.sampling import SamplingSettings
from armlm.interchange.source import ExportSource
from armlm.models.attention import BIDIRECTIONAL
from armlm.models.backbone import Transformer
from armlm.models.checkpoint import hyperparameters, read_checkpoint
from armlm.objectives.base import Objective
from armlm.training.pretrained import load_pretrained

# Sentences export checks itself on (tests use real corpus sentences too); different lengths, so a batch pads.
CHECK_SENTENCES = (
    "The river rose after the storm, and the old bridge was closed for a week.",
    "She said that the results were not what anyone had expected.",
    "In 1998 the company moved its offices to a larger building near the station.",
    "Rain.",
)
PARITY_TOLERANCE = 1e-4  # max |delta logit| in fp32


@dataclass
class ParityReport:
    max_abs_logit_diff: float  # over real tokens (or sequences) and supported tokens
    positions: int  # rows compared
    same_argmax: float  # share of rows whose top token or label agrees

    def ok(self) -> bool:
        return self.max_abs_logit_diff < PARITY_TOLERANCE


@torch.no_grad()
def armlm_outputs(source: ExportSource, batch: dict[str, Tensor]) -> Tensor:
    """What armlm's model gives for a right-padded batch (input_ids, attention_mask, token_type_ids): LM logits
    (B, T, V), tag logits (B, T, tags) or class logits (B, labels)."""
    if source.finetuned:
        ckpt = read_checkpoint(source.checkpoint)
        module = FinetuneModule(**migrate_finetune_hparams(hyperparameters(ckpt)))
        module.load_state_dict(ckpt["state_dict"])
        return module.eval()(batch)
    model, objective, tokenizer = armlm_backbone(source.checkpoint)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    if source.is_causal_lm:
        return model.logits(objective.next_token_states(model, ids, token_id(tokenizer, MASK)))
    return model.logits(model(ids, attention=BIDIRECTIONAL, attention_mask=None if bool(mask.all()) else mask,
                              token_type_ids=batch.get("token_type_ids")))


def compare(ours: Tensor, theirs: Tensor, attention_mask: Tensor, excluded: list[int]) -> ParityReport:
    """max |delta| over real rows (sequence heads: every row) and every token in the support."""
    if ours.shape != theirs.shape:
        raise ArmlmError(f"exported model gives shape {tuple(theirs.shape)}, armlm {tuple(ours.shape)}")
    if ours.dim() == 3:
        rows = attention_mask.bool()
        ours, theirs = ours[rows], theirs[rows]
    keep = torch.ones(ours.shape[-1], dtype=torch.bool)
    keep[excluded] = False
    diff = (ours[:, keep].double() - theirs[:, keep].double()).abs()
    same = (ours[:, keep].argmax(-1) == theirs[:, keep].argmax(-1)).double().mean()
    return ParityReport(float(diff.max()), int(ours.shape[0]), float(same))


def armlm_backbone(checkpoint: str | Path) -> tuple[Transformer, type[Objective], Tokenizer]:
    """A pretraining checkpoint's backbone (eval mode), objective class and tokenizer."""
    pretrained = load_pretrained(checkpoint)
    return pretrained.backbone(), pretrained.objective_class, Tokenizer.from_str(pretrained.tokenizer_json)


@torch.no_grad()
def generate_agreement(checkpoint: str | Path, folder: Path, prompts: list[str], new_tokens: int = 12) -> int:
    """How many prompts greedy `generate()` on the exported folder (its own defaults) continues exactly as armlm's
    greedy sampler does with `armlm generate`'s settings (special tokens but [EOD] banned, stop at [EOD])."""
    model, objective, tokenizer = armlm_backbone(checkpoint)
    hf = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    eod = token_id(tokenizer, EOD)
    banned = banned_tokens(tokenizer)
    same = 0
    for prompt in prompts:
        ids = encode_prompt(tokenizer, prompt)
        theirs = hf.generate(ids[None], attention_mask=torch.ones_like(ids)[None], max_new_tokens=new_tokens)[0]
        request = Request(prompt=ids, new_tokens=new_tokens, samples=1, sampling=SamplingSettings(temperature=0.0),
                          banned=banned, eod_id=eod, mask_id=token_id(tokenizer, MASK))
        ours = left_to_right(model, request, torch.Generator().manual_seed(0), objective)[0].tolist()
        # armlm fills a row after its [EOD] with more [EOD]; generate() stops there
        stop = ours.index(eod, len(ids)) + 1 if eod in ours[len(ids):] else len(ours)
        same += theirs.tolist() == ours[:stop]
    return same


@torch.no_grad()
def fill_mask_agreement(checkpoint: str | Path, folder: Path, sentences: list[str], top_k: int = 5) -> int:
    """How many sentences (third word masked) the exported folder's fill-mask pipeline gives armlm's top-k for, in
    order."""
    model, _, tokenizer = armlm_backbone(checkpoint)
    fill = pipeline("fill-mask", model=str(folder), trust_remote_code=True, top_k=top_k)
    same = 0
    for text in sentences:
        words = text.split()
        masked = " ".join([*words[:2], MASK, *words[3:]])
        ids = encode_prompt(tokenizer, masked)
        position = int((ids == token_id(tokenizer, MASK)).nonzero()[0, 0])
        logits = model.logits(model(ids[None], attention=BIDIRECTIONAL))[0, position]
        same += [p["token"] for p in fill(masked)] == logits.topk(top_k).indices.tolist()
    return same
