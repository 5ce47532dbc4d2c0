"""FDSL front end: parse (Lark) -> AST -> check -> typed chain; the op table; diagnostics."""
