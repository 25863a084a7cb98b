# Stage "data": its rules are added by the issue that builds the stage.
# Targets for `snakemake data` come from pipeline_lib.targets.stage_targets.
