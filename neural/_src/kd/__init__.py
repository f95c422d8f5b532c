"""The KD experiment and its bridge to fedkrr."""
