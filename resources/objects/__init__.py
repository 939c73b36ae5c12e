"""Object stores: a local directory (the embedded default) and S3, behind one interface.

May import: `resources.errors`, `resources.retry`, and boto3/pyarrow.
"""
