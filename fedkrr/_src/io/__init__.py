"""Files in and out: atomic writes, bounded readers, problem files, synthetic data, signals."""
