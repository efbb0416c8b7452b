"""Analyses over the performance database: lower bounds, composition, comparisons."""
