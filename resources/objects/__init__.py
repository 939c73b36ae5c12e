"""Object stores: a local directory (the embedded default) and S3, behind one interface.

Holds `base` (the `ObjectStore` interface, `ObjectInfo`, `ObjectStoreError`), `local`, `s3`
and `factory` (`object_store_for`, which picks the store for a URL).

May import: `resources.errors`, `resources.retry`, and boto3/pyarrow.
"""
