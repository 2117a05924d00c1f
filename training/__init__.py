"""Training-loop pieces shared by pretraining and fine-tuning runs (callbacks)."""
