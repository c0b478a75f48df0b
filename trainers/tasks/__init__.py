"""Data for the training tasks (the Latin Square Task in `trainers.tasks.lst`)."""
