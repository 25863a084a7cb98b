"""Which Snakemake profiles the running command loads, so the tiny default never leaks into a cluster run.

Snakemake 9 loads ``profiles/default`` as the *workflow profile* whenever it runs from the repository root, and a
workflow profile wins key by key over every ``--profile`` (``snakemake.cli.parse_args``): its ``cores: 2`` would cap
every Slurm job's threads at 2 and its ``judge_requests`` cap would replace the Slurm profile's. So
``profiles/default/config.yaml`` is a YTE template whose settings apply only when :func:`other_profile_given` is
false, i.e. to plain ``snakemake`` (and to ``--profile profiles/default``).
"""

from __future__ import annotations

import inspect
from pathlib import Path


def _profile_file(profile: str | Path) -> Path | None:
    """The YAML file Snakemake reads for ``profile`` (a name, a folder or a file), resolved as Snakemake does."""
    from snakemake.cli import get_profile_dir

    entry = get_profile_dir(str(profile))
    return None if entry is None else entry[1].resolve()


def other_profile_given() -> bool:
    """True when the ``snakemake`` command being parsed loads a profile other than its workflow profile
    (``--profile X`` or ``$SNAKEMAKE_PROFILE``).

    Read from what Snakemake itself resolved, the locals of ``snakemake.cli.parse_args`` (which reads the profile
    files), so argument abbreviations, the environment variable, ``--profile none`` and in-process calls of
    ``snakemake.cli.main`` all count as Snakemake counts them. Outside that function (the profile parsed by anything
    else) nothing else was given: False. tests/workflow/test_profiles.py runs the real commands, so a Snakemake release
    that renames these locals fails there rather than silently bringing the leak back.
    """
    frame = inspect.currentframe()
    try:
        while frame is not None:
            if frame.f_code.co_name == "parse_args" and frame.f_globals.get("__name__") == "snakemake.cli":
                args = frame.f_locals.get("args")
                given = getattr(args, "profile", None) or []
                workflow_profile = frame.f_locals.get("workflow_profile")
                own = _profile_file(workflow_profile) if workflow_profile is not None else None
                return any(_profile_file(profile) != own for profile in given)
            frame = frame.f_back
        return False
    finally:
        del frame
