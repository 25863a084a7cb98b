"""Moved: the settings of every job are built in :mod:`pipeline_lib.plan.settings` (runs as typed
:class:`~pipeline_lib.plan.spec.RunSpec`); these names stay importable from here for the modules that still read
them from this path (the rules, targets and groups, owned elsewhere), until they import the plan."""

from pipeline_lib.plan.settings import eval_spec, imagenet_run_spec, tiny_task_spec

__all__ = ["eval_spec", "imagenet_run_spec", "tiny_task_spec"]
