"""A single-process PyTorch engine with the paper's objectives, for tiny models on a CPU (or one GPU)."""
