"""Rendering: rich tables, JSON and plots of what the analysis stages return."""
