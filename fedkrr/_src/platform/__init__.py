"""The platform under the mathematics: memory planning, device meshes, XLA flags."""
