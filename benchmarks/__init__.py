"""Benchmarks of trio-mplex against baselines measured in the same run."""
