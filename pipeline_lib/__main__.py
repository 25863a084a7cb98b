"""``python -m pipeline_lib <command>``: the package's own commands (``audit``, ``calibrate``: the estimates corrected
by the first runs' step times, ``plan``, ``settings``: regenerate the files generated from the config schema,
``fidelity``: regenerate ``docs/fidelity.md`` from the paper plan)."""

import sys

from pipeline_lib.core import schema_docs
from pipeline_lib.jobs import audit
from pipeline_lib.paper import fidelity
from pipeline_lib.plan import calibrate, table


def main() -> int:
    commands = {"audit": audit.main, "calibrate": calibrate.main, "plan": table.main, "settings": schema_docs.main,
                "fidelity": fidelity.main}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(f"usage: python -m pipeline_lib {{{','.join(commands)}}} ...", file=sys.stderr)
        return 2
    return commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
