"""Taking a model out of armlm: export to Hugging Face transformers (export.py) and the modelling file it ships."""
