"""The binding layer, module by module (``batchfuzz.bind`` is its public face).

- ``errors``: the outcomes besides a callable (``Absent``, ``Unbindable``,
  ``StandInReached``);
- ``source``: source access (``SourceTree``, ``TextTree``, ``SourceFile``,
  ``Piece``);
- ``slicing``: statement slicing and data flow over a method's AST
  (``Writes``, ``slice_statements``, the names a piece reads);
- ``loader``: namespace resolution and compiling (``Loader``);
- ``kit``: the binding author's kit (stand-ins, recorders, converters,
  argument checks, ``probe``).

Import from ``batchfuzz.bind``; the modules here are its implementation.
"""
