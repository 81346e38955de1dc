"""Exercise checks, one module per chapter: ``mha.checks.ch01`` and so on."""
