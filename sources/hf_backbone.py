"""A transformers masked or causal LM behind armlm's backbone interface (sources.base.Backbone), and the probes that
decide at load what it can be asked: its own head on its base model's states (`probe_head`), and the other static
attention where it obeys a 4D mask (`switched_attention`)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from armlm.common.errors import ArmlmError
from armlm.models.attention import Attention

PROBE_TOLERANCE = 1e-4  # head(base(x)) against the model's own logits, fp32

@dataclass(frozen=True)
class BackboneShape:
    """What the instruments read of `backbone.config` (models.backbone.ModelConfig's names)."""

    vocab_size: int
    max_len: int
    n_layers: int
    d_model: int

    def to_dict(self) -> dict[str, int]:
        return {"vocab_size": self.vocab_size, "max_len": self.max_len, "n_layers": self.n_layers,
                "d_model": self.d_model}


class _Handoff(nn.Module):
    """Stands in for a transformers LM's base model: runs it, or, while `handed` holds states, returns them, so the
    LM's own forward applies its head to states it did not compute."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.handed: Tensor | None = None

    def get_input_embeddings(self) -> nn.Module:  # what a transformers LM asks its base model for
        return self.inner.get_input_embeddings()

    def __getattr__(self, name: str) -> Any:
        """The base model's own attributes too: a head may read a table through it (armlm's modelling file reads its
        tied embedding as `self.armlm.token_embedding`)."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("inner"), name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.handed is None:
            return self.inner(*args, **kwargs)
        from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=self.handed)


class HuggingFaceBackbone(nn.Module):
    """A transformers masked or causal LM behind the backbone interface (sources.base.Backbone): `forward` gives the
    base model's last hidden states, `layer_states` every layer's (the embeddings first when asked), `logits` the
    model's own head on given states. It attends as its class does, and in the other static kind only where
    `switched_attention` proved the model obeys a 4D mask (`attentions`)."""

    def __init__(self, lm: nn.Module, attention_kind: str) -> None:
        super().__init__()
        self.lm = lm.eval()
        prefix = lm.base_model_prefix
        if not prefix or getattr(lm, prefix, None) is None:
            raise ArmlmError(f"{type(lm).__name__} has no base model under base_model_prefix={prefix!r}; armlm reads a "
                             "transformers LM as a base model and a head")
        # A head that is a function of the input table (armlm's modelling file) has no output embeddings of its own;
        # either table is read before the base model is handed off below
        head = lm.get_output_embeddings()
        vocab_size = int((lm.get_input_embeddings() if head is None else head).weight.shape[0])
        self._handoff = _Handoff(getattr(lm, prefix))
        setattr(lm, prefix, self._handoff)
        self.attention_kind = attention_kind
        self.attentions: tuple[str, ...] = (attention_kind,)
        self.base = self._handoff.inner
        self._takes_types = "token_type_ids" in inspect.signature(self.base.forward).parameters
        config = lm.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.config = BackboneShape(vocab_size=vocab_size,
                                    max_len=int(getattr(text, "max_position_embeddings", 0) or getattr(text, "n_positions")),
                                    n_layers=int(text.num_hidden_layers), d_model=int(text.hidden_size))

    def _check(self, attention: Attention) -> None:
        if attention.kind not in self.attentions or attention.documents is not None:
            raise ArmlmError(f"{type(self.lm).__name__} attends {' or '.join(self.attentions)} only (its transformers "
                             f"class fixes its mask), not {attention.kind}"
                             + (" within documents" if attention.documents is not None else ""))

    def _mask(self, attention: Attention, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor | None:
        """The model's own 2D padding mask under its native attention; otherwise a (B, 1, T, T) bool mask, True
        where a query may read a key, padding folded in."""
        if attention.kind == self.attention_kind:
            return attention_mask
        b, t = input_ids.shape
        allowed = torch.ones(b, 1, t, t, dtype=torch.bool, device=input_ids.device)
        if attention.kind == "causal":
            allowed = allowed.tril()
        if attention_mask is not None:
            allowed = allowed & attention_mask.bool()[:, None, None, :]
        return allowed

    def _run(self, input_ids: Tensor, attention: Attention, attention_mask: Tensor | None,
             token_type_ids: Tensor | None, hidden_states: bool) -> Any:
        self._check(attention)
        if input_ids.shape[1] > self.config.max_len:
            raise ArmlmError(f"an input of {input_ids.shape[1]} tokens is longer than the {self.config.max_len} positions "
                             f"{type(self.lm).__name__} takes; shorten it")
        kwargs: dict[str, Any] = {"attention_mask": self._mask(attention, input_ids, attention_mask),
                                  "output_hidden_states": hidden_states}
        # Segment ids go in only where the template uses them: GPT-2 adds wte[type] to every position when given
        # any, so all-zero ids would not be its default.
        if self._takes_types and token_type_ids is not None and bool(token_type_ids.any()):
            kwargs["token_type_ids"] = token_type_ids
        return self.base(input_ids=input_ids, return_dict=True, **kwargs)

    def forward(self, input_ids: Tensor, *, attention: Attention, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, output_mask: Tensor | None = None,
                position_ids: Tensor | None = None) -> Tensor:
        if position_ids is not None:
            raise ArmlmError(f"{type(self.lm).__name__} is read at its own positions; position_ids are armlm's PLM's")
        hidden = self._run(input_ids, attention, attention_mask, token_type_ids, hidden_states=False)[0]
        return hidden if output_mask is None else hidden[output_mask]

    def layer_states(self, input_ids: Tensor, *, attention: Attention, attention_mask: Tensor | None = None,
                     token_type_ids: Tensor | None = None, with_embeddings: bool = False) -> list[Tensor]:
        """transformers' `hidden_states`: the embeddings, then each layer's output as the model returns it (a
        pre-LN decoder's last one after its final norm, the others before it)."""
        states = list(self._run(input_ids, attention, attention_mask, token_type_ids, hidden_states=True).hidden_states)
        return states if with_embeddings else states[1:]

    def logits(self, hidden: Tensor) -> Tensor:
        """The model's own head on states of any leading shape."""
        flat = hidden.reshape(1, -1, hidden.shape[-1])
        self._handoff.handed = flat
        try:
            logits = self.lm(input_ids=torch.zeros(flat.shape[:2], dtype=torch.long, device=flat.device)).logits
        finally:
            self._handoff.handed = None
        return logits.reshape(*hidden.shape[:-1], logits.shape[-1])


def probe_head(backbone: HuggingFaceBackbone, source: str, start: int) -> None:
    """head(base(x)) must be the model's own logits: a model that computes anything else from more than its base
    model's last states (a soft cap, say) would be misread, so it is refused."""
    ids = torch.tensor([[start] + [i % backbone.config.vocab_size for i in range(7, 14)]],
                       device=next(backbone.parameters()).device)
    attention = Attention.named(backbone.attention_kind)
    with torch.no_grad():
        own = backbone.lm(input_ids=ids).logits
        try:
            split = backbone.logits(backbone(ids, attention=attention))
        except TypeError as err:  # a base model that does not take transformers' arguments (input_ids=, ...)
            raise ArmlmError(f"{source}: its base model ({type(backbone.base).__name__}) does not take transformers' "
                             f"arguments ({err}); armlm reads a model as a transformers base model and a head. A "
                             "folder armlm exported with its own modelling file: give the armlm checkpoint it came from "
                             "(its README.md names it)") from err
    gap = float((own - split).abs().max())
    if gap > PROBE_TOLERANCE:
        raise ArmlmError(f"{source}: its logits differ from its head applied to its base model's states by {gap:.2e}; "
                         "armlm cannot read its states apart from its head")


def switched_attention(backbone: HuggingFaceBackbone, start: int) -> tuple[str, ...]:
    """The static attention kinds the backbone obeys, probed on 8 tokens: the native one, and the other where a 4D
    mask of it is taken and followed (bidirectional: the first state moves when the last token changes; causal: it
    does not, and equals the state without that token)."""
    other = "causal" if backbone.attention_kind == "bidirectional" else "bidirectional"
    device = next(backbone.parameters()).device
    ids = torch.tensor([[start] + [7 + i % (backbone.config.vocab_size - 7) for i in range(7)]], device=device)
    changed = ids.clone()
    changed[0, -1] = 7 + (int(ids[0, -1]) - 6) % (backbone.config.vocab_size - 7)
    backbone.attentions = (backbone.attention_kind, other)
    attention = Attention.named(other)
    try:
        with torch.no_grad():
            first, moved = (backbone(x, attention=attention)[0, 0] for x in (ids, changed))
            shorter = backbone(ids[:, :-1], attention=attention)[0, 0]
    except (TypeError, ValueError, RuntimeError):  # a model that takes no 4D mask
        backbone.attentions = (backbone.attention_kind,)
        return backbone.attentions
    gap = float((first - moved).abs().max())
    obeys = gap > PROBE_TOLERANCE if other == "bidirectional" else (
        gap <= PROBE_TOLERANCE and float((first - shorter).abs().max()) <= PROBE_TOLERANCE)
    backbone.attentions = (backbone.attention_kind, other) if obeys else (backbone.attention_kind,)
    return backbone.attentions
