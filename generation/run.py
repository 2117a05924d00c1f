"""`armlm generate checkpoint=<ckpt or run folder> prompt="..."`: samples from a pretraining checkpoint, printed
and written to <run folder>/samples.json."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from tokenizers import Tokenizer

from armlm.common.atomic import atomic_write_text
from armlm.common.devices import check_device
from armlm.common.errors import ArmlmError
from armlm.common.rules import Rule, at_least, check_rules
from armlm.common.vocabulary import CLS, EOD, MASK, SPECIAL_TOKENS
from armlm.datamodules.encoding import token_id
from armlm.generation.decode import REQUEST_RULES, Request, generator_for
from armlm.generation.sampling import SAMPLING_RULES, SamplingSettings
from armlm.sources.base import Reading
from armlm.training.pretrained import load_pretrained

log = logging.getLogger("armlm.generate")

# the command's own, and those of the objects it builds, checked before a checkpoint is loaded
GENERATE_RULES = (Rule("seed", (int,), at_least(0), "an integer >= 0"), *REQUEST_RULES, *SAMPLING_RULES)


def encode_prompt(tokenizer: Tokenizer, prompt: str) -> torch.Tensor:
    """[CLS] + the prompt's tokens: pretraining blocks start with [CLS], so every sample does too."""
    return torch.tensor([token_id(tokenizer, CLS), *tokenizer.encode(prompt, add_special_tokens=False).ids])


def banned_tokens(tokenizer: Tokenizer) -> torch.Tensor:
    """The ids a sampler never proposes: every special token but [EOD], where a sample stops."""
    return torch.tensor([token_id(tokenizer, t) for t in SPECIAL_TOKENS if t != EOD])


def run_generation(cfg: DictConfig) -> dict[str, Any]:
    started = time.perf_counter()
    if not cfg.get("checkpoint"):
        raise ArmlmError("checkpoint= is missing; give a pretraining checkpoint file or run folder")
    check_rules(cfg, GENERATE_RULES)
    sampling = SamplingSettings(cfg.temperature, cfg.top_k, cfg.top_p)
    check_device(cfg.device)
    pretrained = load_pretrained(cfg.checkpoint)
    reading = Reading.of_objective(pretrained.objective_class)
    generate = generator_for(reading)
    unmasking = {"steps": cfg.steps, "order": str(cfg.order)}
    generate.refuse_what_it_ignores(unmasking)  # before the model is built
    model = pretrained.backbone(cfg.device)
    tokenizer = Tokenizer.from_str(pretrained.tokenizer_json)
    prompt = encode_prompt(tokenizer, str(cfg.prompt))
    length = len(prompt) + int(cfg.new_tokens)
    limit = pretrained.trained_length or model.config.max_len
    if length > limit:
        raise ArmlmError(f"the prompt ({len(prompt)} tokens with [CLS]) plus new_tokens={cfg.new_tokens} make "
                         f"{length}, beyond the {limit} positions the checkpoint was trained on; lower new_tokens")
    eod = token_id(tokenizer, EOD)
    banned = banned_tokens(tokenizer)
    request = Request(prompt, int(cfg.new_tokens), int(cfg.samples), sampling, banned, eod,
                      token_id(tokenizer, MASK), None if cfg.steps is None else int(cfg.steps), str(cfg.order))
    ids = generate(model, request, torch.Generator(device=cfg.device).manual_seed(int(cfg.seed)), reading)
    texts = [tokenizer.decode(row[1:].tolist(), skip_special_tokens=False) for row in ids]
    result = {"checkpoint": str(pretrained.path), "objective": pretrained.objective_name,
              "method": generate.name, "prompt": str(cfg.prompt), "new_tokens": int(cfg.new_tokens),
              **generate.what_it_read(unmasking), "temperature": float(sampling.temperature),
              "top_k": sampling.top_k, "top_p": float(sampling.top_p), "seed": int(cfg.seed), "samples": texts,
              "seconds": round(time.perf_counter() - started, 2)}
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "samples.json", json.dumps(result, indent=2))
    for i, text in enumerate(texts, 1):
        log.info("sample %d (%s, %s): %s", i, pretrained.objective_name, generate.name, text)
    return result
