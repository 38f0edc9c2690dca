"""Contract records, one module per contract; each calls ``registry.register``."""
