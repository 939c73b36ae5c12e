"""The SQLite store: the embedded default, one file in WAL mode, safe across processes.

May import: `resources.coordination`, `resources.ledger`, `resources.retry`, `resources.errors`.
"""
