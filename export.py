"""Export a pretraining or fine-tuned checkpoint to a folder Hugging Face transformers loads offline.

    python export.py checkpoint=outputs/ar/<time> out=exports/ar
    python export.py checkpoint=outputs/sst2/<time>/checkpoints/last.ckpt out=exports/sst2 format=remote

The export is loaded back and its logits held against armlm's before the folder appears (interchange.export).
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from common.cli import CONFIG_ERRORS, run_or_exit
from interchange.export import ExportResult, export_checkpoint

log = logging.getLogger("armlm.export")


def run_export(cfg: DictConfig) -> ExportResult:
    result = export_checkpoint(cfg.checkpoint, cfg.out, format=str(cfg.format), overwrite=bool(cfg.overwrite))
    how = "native, no remote code" if result.native else "armlm's modelling file: trust_remote_code=True"
    log.info("wrote %s: %s (%s); max |delta logit| vs armlm %.2e over %d rows, same top prediction on %.0f%%, "
             "tokenizer ids equal: %s", result.out, result.target, how, result.parity.max_abs_logit_diff,
             result.parity.positions, 100 * result.parity.same_argmax, result.ids_equal)
    if result.not_native:
        log.info("not native because: %s", "; ".join(result.not_native))
    return result


@hydra.main(version_base="1.3", config_path="configs", config_name="export")
def main(cfg: DictConfig) -> None:
    run_or_exit(run_export, cfg, log, errors=(*CONFIG_ERRORS, FileExistsError))


if __name__ == "__main__":
    main()
