"""Configs, checkpoints, plots, run directories and the round loop."""
