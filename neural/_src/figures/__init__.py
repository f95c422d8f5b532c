"""The main job's report and the paper figures' runs."""
