"""The paper's theory (Sec. 3 and App. A) in one place.

:mod:`~pipeline_lib.core.theory.formulas`
    Closed forms (omega, h, limits, ESS, adaptive tau) and Monte Carlo estimators through the advantage registry.
:mod:`~pipeline_lib.core.theory.checks`
    One numerical check per equation: a closed form against an independent computation.
:mod:`~pipeline_lib.core.theory.compute`
    The ``paper_theory_data`` step: the curves, weights and verification report that
    :mod:`pipeline_lib.paper.theory` draws.
"""
