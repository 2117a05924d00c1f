"""A reduced copy of babylm/evaluation-pipeline-2025's BLiMP rule (evaluation_pipeline/sentence_zero_shot: dataset.py's
tokens and phrase masks, compute_results.py's sums and its torch.max pick), written here for offline tests. It is held
equal to the pipeline itself where a checkout of it is given (BABYLM_PIPELINE; tests/test_babylm_pipeline.py).

Per sentence: the export's tokenizer with its special tokens and offsets; the scored tokens are those whose offset
ends after character 0 (every real token: BLiMP's completion is the whole sentence). causal: each scored token's
log-probability given the tokens before it. mlm: each scored token masked alone, read where it is. mntp: each scored
token masked alone (not the first, unless a [CLS]/BOS leads), read one position back. A pair's pick is torch.max over
(good, bad): the first on a tie."""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.no_grad()
def pipeline_score(model: torch.nn.Module, tokenizer, sentence: str, backend: str) -> float:
    encoded = tokenizer(sentence, return_offsets_mapping=True)
    tokens, offsets = encoded["input_ids"], encoded["offset_mapping"]
    scored = [i for i, (_, end) in enumerate(offsets) if end > 0]
    ids = torch.tensor([tokens])
    if backend == "causal":
        log_probs = F.log_softmax(model(input_ids=ids).logits[0, :-1], dim=-1)
        return float(sum(log_probs[i - 1, tokens[i]] for i in scored if i > 0))
    prepend = tokenizer.cls_token_id is not None or tokenizer.bos_token_id is not None
    if backend == "mntp":
        scored = [i for i in scored if i != 0 or prepend]
    shift = 1 if backend == "mntp" else 0
    total = 0.0
    for i in scored:
        masked = ids.clone()
        masked[0, i] = tokenizer.mask_token_id
        log_probs = F.log_softmax(model(input_ids=masked).logits[0, i - shift], dim=-1)
        total += float(log_probs[tokens[i]])
    return total


def pipeline_picks_good(good: float, bad: float) -> bool:
    """torch.max over (good, bad) picks index 0 on a tie: the pipeline's rule."""
    return int(torch.max(torch.tensor([good, bad]), dim=0)[1]) == 0
