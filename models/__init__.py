"""The shared backbone, its heads and the LightningModule that trains any objective."""

from models.backbone import ModelConfig, Transformer
from models.heads import ClassificationHead

__all__ = ["ClassificationHead", "ModelConfig", "Transformer"]
