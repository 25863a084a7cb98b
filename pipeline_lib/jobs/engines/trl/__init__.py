"""GPU paths of the baselines verl does not have, on Hugging Face TRL (Iterative DPO: ``trl.DPOTrainer``)."""
