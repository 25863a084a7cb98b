"""``python -m pipeline_lib <command>``: the package's own commands (``audit``, ``calibrate``: the estimates corrected
by the first runs' step times, ``plan``, ``settings``: regenerate the files generated from the config schema,
``fidelity``: regenerate ``docs/fidelity.md`` from the paper plan; ``hub-lock``: pin the hub revisions a config's plan
reads; ``reruns``: the jobs an edit of code would rerun, priced, before anything runs)."""

import sys
import tempfile
from pathlib import Path

from pipeline_lib.core import schema_docs
from pipeline_lib.core.cli import entry_parser
from pipeline_lib.jobs import audit, fetch
from pipeline_lib.paper import fidelity
from pipeline_lib.plan import calibrate, plan_runs, reruns, table
from pipeline_lib.plan.hub import HUB_LOCK, hub_repos, repos_json


def hub_lock(argv: list[str]) -> int:
    """``hub-lock --configfile CONFIG...``: resolve every hub repository the configs' plan reads to its commit on the
    hub now (HF_ENDPOINT, HF_TOKEN as `fetch` reads them) and write them into the hub lock, on purpose (online)."""
    parser = entry_parser(hub_lock.__doc__, "pipeline_lib hub-lock", summary="line", logs=False)
    parser.add_argument("--configfile", nargs="+", required=True, help="config file(s), merged in order")
    parser.add_argument("--lock", default=str(HUB_LOCK), help="the hub lock (default: %(default)s)")
    args = parser.parse_args(argv)
    config = table.load_config(args.configfile)
    repos = hub_repos(config, plan_runs(config, check_estimators=False))
    with tempfile.TemporaryDirectory(prefix="hub-lock-") as tmp:
        listing = Path(tmp, "repos.json")
        listing.write_text(repos_json(repos))
        return fetch.main(["--repos", str(listing), "--relock", "--lock", args.lock])


def main() -> int:
    commands = {"audit": audit.main, "calibrate": calibrate.main, "plan": table.main, "settings": schema_docs.main,
                "fidelity": fidelity.main, "hub-lock": hub_lock, "reruns": reruns.main}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(f"usage: python -m pipeline_lib {{{','.join(commands)}}} ...", file=sys.stderr)
        return 2
    return commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
