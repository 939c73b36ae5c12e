"""`leasehold` in a process whose first message deletion on an SQS queue stops dead: the units
of the tick exist, its messages are not deleted yet — the moment a SIGKILL is most dangerous.

    python -m tests.support.pausing_queue <marker> resources.cli.main run

writes `<marker>` there and sleeps, so the test can SIGKILL the process at exactly that point;
AWS actions are recorded as `aws_action_recorder` records them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from resources.notifications.queue import EventQueue
from tests.support.aws_action_recorder import run_child


def pause_before_delete(marker: Path) -> None:
    delete = EventQueue.delete

    def pausing(self: EventQueue, messages: Any) -> int:
        if messages and not marker.exists():
            marker.write_text(f"{len(messages)} messages received, units created\n")
            time.sleep(600)
        return delete(self, messages)

    EventQueue.delete = pausing  # type: ignore[method-assign]


if __name__ == "__main__":
    pause_before_delete(Path(sys.argv[1]))
    run_child(sys.argv[2:])
