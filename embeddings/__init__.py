"""Static word vectors (count-based, word2vec, fastText, GloVe) trained on the pretraining corpus, and the
word-level benchmarks every embedding, static or contextual, is scored on."""
