"""The training loop: the pretraining LightningModule, callbacks, optimiser, checkpoint IO, run setup and
checks, and pretrained checkpoints opened for fine-tuning and diagnostics."""
