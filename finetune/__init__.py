"""Fine-tuning pretrained armlm backbones on GLUE and CoNLL-2003 (issue 3; metrics and alignment so far)."""
