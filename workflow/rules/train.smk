# Stage "train": its rules are added by the issue that builds the stage.
# Targets for `snakemake train` come from pipeline_lib.targets.stage_targets.
