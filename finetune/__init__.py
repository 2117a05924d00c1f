"""Fine-tuning pretrained armlm backbones on GLUE and CoNLL-2003: the module, its metrics, the run."""
