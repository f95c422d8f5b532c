"""Optimisers and the training loops."""
