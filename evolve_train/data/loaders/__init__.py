"""Loaders turning released data layouts into a :class:`~evolve_train.data.timeline.Timeline`.

* :mod:`.evolvingqa` — the EvolvingQA release layout (``data=evolvingqa``);
* :mod:`.temporal_qa` — generic timestamped QA items plus per-step training files (``data=temporal_qa``);
* :mod:`.evolvebench` — EvolveBench-style event files (multiple-choice and open-form items).

Every loader validates its input completely before returning, so a bad file fails before a run
directory is written (see ``docs/data.md``).
"""
