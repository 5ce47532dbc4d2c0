"""Our own IR rewrites, one per file; each is exposed as a named pass in compiler/passes.py."""
