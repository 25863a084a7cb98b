"""Layer 1, core: what every stage stands on (environment, I/O, config, tracking, provenance, statistics,
checkpoints, the run spec, the model code, the LLM client), with the RL maths (``core.rl``), the tasks' data
(``core.data``), rewards (``core.rewards``) and the theory (``core.theory``). Imports nothing above it
(tests/workflow/test_layers.py)."""
