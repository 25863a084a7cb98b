"""The data stage: every dataset of the paper, the tiny synthetic tasks, and their manifests.

Every builder writes the same three things (``schema.DatasetWriter``): RL parquet in
verl's RLHFDataset schema, SFT parquet in verl's multi-turn schema, and a manifest.
"""
