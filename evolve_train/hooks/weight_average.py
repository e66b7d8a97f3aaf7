"""``method.average``: the checkpoint of step k is an average of the steps' trained weights
(``methods/averaging.py``: the running average). ``steps/<k>/`` holds the average (full weights, also for LoRA)
and it is what is evaluated; step k+1 trains from the raw weights (``method.average_continue=raw``, carried in
``train_state/carry/<k>/raw.safetensors`` so a resume continues from them) or from the average."""

from __future__ import annotations

from evolve_train.methods.averaging import WeightAverage, cpu_state
from evolve_train.training import carry
from evolve_train.training.hooks import Hook, register_hook


@register_hook("weight_average")
def weight_average(cfg):
    averaging = WeightAverage(cfg.method)
    return WeightAverageHook(averaging, cfg.method.average_continue) if averaging.enabled else None


class WeightAverageHook(Hook):
    def __init__(self, averaging: WeightAverage, continue_from: str):
        self.averaging, self.continue_from, self.raw = averaging, str(continue_from), None

    def on_run_start(self, run) -> None:
        """A resumed run: ``steps/<start-1>`` (loaded) holds the average; continue from the raw weights kept in
        ``train_state/carry/<start-1>/`` unless ``method.average_continue=average``."""
        if run.start == 0:
            return
        self.averaging.average = cpu_state(run.model)
        if self.continue_from != "raw":
            return
        raw = carry.load(run.run_dir, run.start - 1, carry.RAW_FILE)
        if raw is None:
            raise RuntimeError(
                f"method.average: the raw weights of step {run.start - 1} are missing from "
                f"{carry.carry_dir(run.run_dir, run.start - 1)}; the run cannot continue from them "
                "(method.average_continue=average continues from the average)"
            )
        run.model.load_state_dict(raw)

    def full_weights(self, run, step: int) -> bool:
        return True  # an average is not an adapter

    def before_save(self, run, step: int) -> None:
        """``steps/<step>`` (and the evaluation) get the average; the raw weights are kept for the next step."""
        raw = cpu_state(run.accelerator.unwrap_model(run.model))
        run.model.load_state_dict(self.averaging.update(raw, step))
        self.raw = raw if self.continue_from == "raw" else None

    def carried(self, run, step: int) -> dict:
        return {carry.RAW_FILE: self.raw} if self.raw is not None else {}

    def after_evaluate(self, run, checkpoint: int, model) -> None:
        if model is run.model and self.raw is not None and checkpoint >= 0:  # the average was evaluated:
            run.model.load_state_dict(self.raw)  # the next step trains from the raw weights
            self.raw = None
