"""Flax models and their convolutions."""
