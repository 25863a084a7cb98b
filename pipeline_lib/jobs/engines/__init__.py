"""Training engines behind one interface: the local PyTorch engine (CPU, tiny models) and VeRL (GPU cluster)."""
