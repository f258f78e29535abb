"""Scenario specs that reproduce the papers' figures and tables (see docs/experiments.md)."""
