"""Tests of the `ltm` command line (ltm_cli/)."""
