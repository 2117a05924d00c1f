"""The shared backbone, its heads, the LM loss and the checkpoint reader; objectives and training build on them."""

from armlm.models.backbone import ModelConfig, Transformer
from armlm.models.heads import ClassificationHead

__all__ = ["ClassificationHead", "ModelConfig", "Transformer"]
