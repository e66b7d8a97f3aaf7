"""evolve-train: continual pretraining over time steps and evaluation of what models learn, update and forget."""

__version__ = "0.1.0"
