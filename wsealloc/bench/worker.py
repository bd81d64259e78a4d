"""Worker process of a local bench run: reads one instance as JSON on stdin, prints its row as JSON."""

from __future__ import annotations

import json
import sys

from wsealloc.bench.runner import run_instance


def main() -> None:
    """Entry point of ``python -m wsealloc.bench.worker``."""
    print(json.dumps(run_instance(json.loads(sys.stdin.read())).to_dict()))


if __name__ == "__main__":
    main()
