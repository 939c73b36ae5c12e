"""The DynamoDB store: the multi-node backend in Data Prepper's table layout.

May import: `resources.coordination`, `resources.ledger`, `resources.stores.settings`,
`resources.retry`, `resources.errors`, and boto3.
"""
