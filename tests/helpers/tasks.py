"""What a composed fine-tuning task tells the fine-tuning module, without reading any data."""

from __future__ import annotations

from omegaconf import DictConfig

from armlm.datamodules.finetune import TaskInfo
from armlm.training.setup import build
from tests.helpers.vocabularies import word_tokenizer_json


def task_info(cfg: DictConfig) -> TaskInfo:
    """What the composed task's datamodule tells the fine-tuning module (no data is read to know it)."""
    return build(cfg.task.data, tokenizer_json=word_tokenizer_json(["a"])).info
