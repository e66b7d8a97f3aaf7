"""Meeting other evaluators: a timeline's eval sets as lm-evaluation-harness tasks (``lm_eval.py``, with the
scoring file shipped next to them, ``lm_eval_utils.py``) and lm-eval's logged samples read back as predictions
(``lm_eval_samples.py``)."""
