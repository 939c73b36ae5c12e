"""Records by key: which record of a key a published snapshot serves
(docs/concepts/keys-and-changes.md).

Holds `keys` (a record id's 128-bit hash, vectorised), `key_index` (a table partition's key
index: each key's winning row, sorted by hash; how new rows resolve against it; one row per key
of a batch) and `served` (what a publication serves per ledger file: the file itself or a copy
without the rows that lost). Pure: the publisher and the merge writer do the I/O.
May import: `resources.key_settings`, `resources.errors`; pyarrow, numpy, pandas.
"""
