"""Taking a model out of armlm: export to Hugging Face transformers (`armlm export`) and the modelling file it ships."""
