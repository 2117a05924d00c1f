"""Static word vectors, or a checkpoint's type-level vectors, on the word benchmarks: `armlm embeddings`
(docs/guides/embeddings.md).

    python embeddings.py method=word2vec_skipgram seed=1
"""

import sys

from armlm_cli.commands import main as armlm

if __name__ == "__main__":
    armlm(["embeddings", *sys.argv[1:]])
