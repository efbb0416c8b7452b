"""Benchmark generation, the timing harness and its statistics."""
