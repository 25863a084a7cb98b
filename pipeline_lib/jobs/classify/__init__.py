"""The ImageNet objective study (paper Sec. "ImageNet classification"): ML vs REINFORCE vs GRPO vs SoftmaxGRPO.

A classifier is the one setting where exact maximum likelihood is available in closed form,
so it measures how closely each sampled-label RL objective approaches it.
"""
