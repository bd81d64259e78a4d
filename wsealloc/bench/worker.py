"""Worker process of a bench run: reads one :class:`~wsealloc.bench.runner.Task` as JSON on stdin
(parsed back into the typed task: request, arch and all), prints its row as JSON."""

from __future__ import annotations

import json
import sys

from wsealloc.bench.runner import Task, run_instance


def main() -> None:
    """Entry point of ``python -m wsealloc.bench.worker``."""
    task = Task.model_validate_json(sys.stdin.read())
    print(json.dumps(run_instance(task).to_dict()))


if __name__ == "__main__":
    main()
