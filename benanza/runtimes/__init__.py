"""Runtimes that execute benchmark specs, behind one interface and registry."""
