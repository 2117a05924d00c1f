"""A tiny backbone for the model and attention tests, in each norm and position variant, and the shape of the
ELECTRA tests' generator and discriminator."""

import torch

from armlm.models.backbone import ModelConfig, Transformer

ELECTRA_SHAPE = dict(d_model=64, n_layers=2, max_len=64, positions="learned", norm_position="pre", dropout=0.0,
                     layer_norm_eps=1e-5, init_std=0.02)
VARIANTS = [("pre", "learned"), ("post", "learned"), ("pre", "rope"), ("post", "rope")]


def tiny_model(norm: str = "pre", positions: str = "learned", **kw) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=40, max_len=32, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                      norm_position=norm, positions=positions, **kw)
    return Transformer(cfg).eval()
