"""Scale: the matrix-free path and agents across devices."""
