"""The party actor: holds clients' rows (or a column block), clips, adds its share of the noise,
encodes and secret-shares, and uploads one share per server."""
