"""Static word vectors on the pretraining corpus, or a checkpoint's type-level vectors per layer, scored on
SimLex-999, WordSim-353 and the Google analogies.

    python embeddings.py method=word2vec_skipgram seed=1     # ppmi_svd | word2vec_cbow | fasttext | glove
    python embeddings.py checkpoint=outputs/mlm/<time>

See embeddings/ and README.md ("Static embeddings").
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from common.cli import run_or_exit
from embeddings.run import run_embeddings

log = logging.getLogger("armlm.embeddings")


@hydra.main(version_base="1.3", config_path="configs", config_name="embeddings")
def main(cfg: DictConfig) -> None:
    run_or_exit(run_embeddings, cfg, log)


if __name__ == "__main__":
    main()
