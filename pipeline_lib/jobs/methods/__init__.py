"""Method logic that belongs to no engine: what the local, verl and TRL engines of one method share.

RARO's verdicts and outcome table (:mod:`.raro`), the expert-answer split (:mod:`.expert`), Rationalization's
demonstration assembly (:mod:`.rationalization`) and the rollout rewards (:mod:`.rewards`) live here, so each engine
imports them from here and no engine imports another: a job's code digest then covers its own engine and this
package, and an edit of the CPU trainer reruns no GPU job (``tests/workflow/test_layers.py`` holds the rule).
"""
