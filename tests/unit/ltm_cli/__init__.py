"""Tests of the `ltm` command line (ltm/cli/)."""
