"""The reports a study or a folder of runs writes: the study's tables and figures, the findings' judgement as
Markdown and CSV, BLiMP, embeddings, curves and fine-tuning tables, and `armlm report`'s registry of them (registry)."""
