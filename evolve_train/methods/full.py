"""Full fine-tuning: every weight trains (the loop's default behaviour)."""

from evolve_train.methods.base import Strategy, register_strategy


@register_strategy("full")
class FullFineTune(Strategy):
    pass
