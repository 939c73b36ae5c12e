"""S3 event notifications as discovery reads them: `s3_events` turns a queue message (the S3
event JSON, also wrapped by SNS or EventBridge) into object events, pure; `queue` receives and
deletes messages on SQS with bounded, jittered retries; `wiring` builds the bucket's
notification entry and the queue's policy statement that connect the two, pure;
`bucket_notifications` reads and writes a bucket's notification configuration.

May import: `resources.errors`, `resources.retry`, boto3/botocore (in `queue` and
`bucket_notifications` only). Imported by `resources.ingestion` (notifications discovery),
the Dagster resources and the CLI (`leasehold notifications`, `leasehold doctor`).
"""
