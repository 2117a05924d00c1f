"""Shared utilities at the bottom of the layers: atomic writes, derived seeds, the vocabulary."""
