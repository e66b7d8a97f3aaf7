"""The evaluators, one module per metric group, each registered by name on import
(``evaluation/registry.py``): ``splits`` (§1-2), ``matrix`` (§3), ``paired`` (§4), ``ablation`` (§5),
``dimensions`` (§6), ``calibration`` (§7) and ``grad_norms`` (gradient analysis), ``paraphrase_gap`` and
``flip_rate`` (§8, in ``hygiene``), ``heldout`` (perplexity on held-out text: general-knowledge forgetting), ``slices`` (§9: held-out loss of
every step's slice), ``retrieval`` (§10, open-book),
``lm_eval`` (lm-evaluation-harness tasks, in ``harness``), ``year_resolved`` (which year's value a checkpoint
picks, in ``years``).
See docs/evaluation.md and docs/hygiene.md."""

from evolve_train.evaluation.evaluators import (  # noqa: F401  (imported to register)
    ablation,
    calibration,
    dimensions,
    grad_norms,
    harness,
    heldout,
    hygiene,
    matrix,
    paired,
    retrieval,
    slices,
    splits,
    years,
)
