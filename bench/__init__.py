"""Benchmark workloads and comparisons (``bide bench``)."""
