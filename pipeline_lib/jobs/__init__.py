"""Layer 3, jobs: what a job runs: the engines (``jobs.engines``), evaluation, judging, the ImageNet study's
training (``jobs.classify``), the audit and the environment locks' tool. Imports core and plan, never
paper (tests/workflow/test_layers.py)."""
