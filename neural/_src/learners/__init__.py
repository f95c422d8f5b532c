"""Learners: networks, forests, NTK, linearised networks, FedAvg."""
