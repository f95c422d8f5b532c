"""Files in and out: atomic writes, bounded readers, synthetic data, signals."""
