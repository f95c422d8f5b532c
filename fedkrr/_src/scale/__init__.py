"""Scale: the matrix-free path, agents across devices, memory planning and XLA flags."""
