# Stage "eval": its rules are added by the issue that builds the stage.
# Targets for `snakemake eval` come from pipeline_lib.targets.stage_targets.
