"""Benchmarks: ratios against peers measured in the same run."""
