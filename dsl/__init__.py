"""FDSL front end: parse (Lark) -> AST -> check -> typed chain; the op table; diagnostics."""
if __name__ != "fusec.dsl":     # this folder imported by its bare name: a second copy of every module in it
    import sys

    def _one_line(kind, value, tb, then=sys.excepthook):
        """An uncaught bare import is one line on stderr (a REPL keeps going); the rest as before."""
        if getattr(value, "bare_import", False):
            print(value, file=sys.stderr)
        else:
            then(kind, value, tb)

    if not getattr(sys.excepthook, "bare_import", False):
        _one_line.bare_import = True
        sys.excepthook = _one_line
    _error = ImportError(f"{__name__} is fusec.dsl: import fusec.dsl, not {__name__} (by its bare name the "
                         "folder is loaded a second time: a second copy of each module, its tables and its error "
                         "classes)", name=__name__)
    _error.bare_import = True
    raise _error
