"""What a stream does with a field its schema does not hold (`schema_evolution` in streams.yaml).

- `add` (the default): the field becomes a new nullable column, appended, typed by its values
  (`field_types`); the unit that found it commits with it, the run goes on.
- `rescue`: the schema stays; a record's unknown fields, and any value that does not cast to its
  column's type, go to the `_rescued` JSON-text column (by field name) instead of being dropped
  or quarantining the record.
- `fail`: an object holding a new field is not committed; its unit is CLOSED with backoff, with a
  message naming the fields, where each was first seen and the setting that lets them in.
- `ignore`: the fields are left out of the table, and counted by name in the run's outcome.

No mode drops, renames or retypes a column: a value whose type changed is quarantined (`add`,
`fail`, `ignore`) or rescued (`rescue`), never cast silently.
"""

from __future__ import annotations

ADD = "add"
RESCUE = "rescue"
FAIL = "fail"
IGNORE = "ignore"
MODES = (ADD, RESCUE, FAIL, IGNORE)
DEFAULT_MODE = ADD

RESCUED = "_rescued"
"""The column `rescue` keeps unknown fields and values that do not cast in: a JSON object of
field name -> value as the source held it."""
