"""The test suite: tests/unit/<package>/ mirrors the source tree, tests/integration/ starts processes
(docs/testing.md § Layout)."""
