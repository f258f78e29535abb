"""The server actor: stores shares, enforces the release gate itself, and returns its result share
S·shares mod 2^64 at most once per job."""
