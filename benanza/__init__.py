"""benanza: lower-bound latencies of deep-learning models from per-layer benchmarks."""

__version__ = "0.1.0"
