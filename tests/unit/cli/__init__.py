"""Tests of the `ltm` command line (cli/)."""
