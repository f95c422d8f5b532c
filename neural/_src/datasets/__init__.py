"""Datasets, partitions, graphs, a run's data and downloads."""
