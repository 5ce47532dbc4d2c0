"""fusec's version (recorded in every artifact; part of the cache keys)."""
__version__ = "0.1.0"
