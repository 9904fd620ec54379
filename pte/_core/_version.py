"""PTE's version, in a module of its own so that the audit writer can record it without an import cycle."""

__version__ = "0.1.0"
