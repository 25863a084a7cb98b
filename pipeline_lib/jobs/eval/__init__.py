"""Checkpoint evaluation: generations with the task's verifier, pass@1 (greedy), sampled pass@k and lengths."""
