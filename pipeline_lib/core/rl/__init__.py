"""The paper's maths: the advantage estimators and their parameter dataclasses, the loss and the group
metrics; what every engine computes with."""
