"""Compact torch trainer: tasks, PE variants, model, training loop, checkpoints."""
