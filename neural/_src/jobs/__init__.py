"""Config files, runs and worker processes."""
