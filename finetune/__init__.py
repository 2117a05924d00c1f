"""Fine-tuning pretrained armlm backbones on GLUE and CoNLL-2003: checkpoint loading, the module, the run."""
