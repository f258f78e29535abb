"""Suite-wide test configuration."""
# Import hypothesis's pretty-printer while the interpreter is in a clean state.  Otherwise the
# hypothesis plugin imports it lazily in pytest's terminal summary, after tests that ran asyncio
# and threads, where CPython 3.11.7's compile() (pytest rewrites plugin modules) can fail with
# "SystemError: AST constructor recursion depth mismatch" and turn a green run red.
import hypothesis.vendor.pretty  # noqa: F401
