"""Entry point: ``python train.py [overrides]`` or ``accelerate launch train.py [overrides]``.

Sweeps: ``python train.py -m method=full,lora`` (never ``accelerate launch train.py -m``; see README).
"""

import hydra
from omegaconf import DictConfig

import evolve_train.config  # noqa: F401  (registers the typed schema as base_config)


@hydra.main(version_base="1.3", config_path="configs", config_name="config")
def main(cfg: DictConfig) -> None:
    from evolve_train.cli.errors import exit_on_user_error
    from evolve_train.run import train

    with exit_on_user_error():
        train(cfg)


if __name__ == "__main__":
    main()
