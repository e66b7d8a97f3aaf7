"""Write docs/options.md: every configuration key of the typed schema (``evolve_train/config.py``), with its value
in the default configuration (``python train.py`` with no overrides) and the docstring under its field.

    python scripts/options_doc.py            # rewrite docs/options.md
    python scripts/options_doc.py --check    # exit 1 if docs/options.md is not what the schema gives

``tests/test_options_doc.py`` runs the check, so the page cannot drift from the code."""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "evolve_train" / "config.py"
PAGE = ROOT / "docs" / "options.md"
HEADER = """# Options

Every key of the configuration, generated from the typed schema (`evolve_train/config.py`) by
`python scripts/options_doc.py`. **default** is the value `python train.py` runs with (the config groups'
defaults of `configs/config.yaml`); a config group (`model=`, `method=`, `data=`, `trainer=`, `eval=`,
`logger=`, `experiment=`) or an override (`trainer.lr=1e-3`) changes it. `python train.py --cfg job` prints the
composed values of any command line; a key the schema does not have is refused before any work starts.
"""


def schema_fields(source: str) -> dict[str, list[tuple[str, str, str]]]:
    """``{class: [(field, annotation, docstring), ...]}`` of every dataclass in ``source``, in source order."""
    classes = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields, body = [], node.body
        for index, item in enumerate(body):
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                doc = ""
                nxt = body[index + 1] if index + 1 < len(body) else None
                if isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant):
                    doc = " ".join(str(nxt.value.value).split())
                fields.append((item.target.id, ast.unparse(item.annotation), doc))
        classes[node.name] = fields
    return classes


def default_config():
    from hydra import compose, initialize_config_dir

    import evolve_train.config  # noqa: F401  (registers the schema)

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return compose(config_name="config")


def render() -> str:
    from omegaconf import OmegaConf

    classes = schema_fields(SCHEMA.read_text(encoding="utf-8"))
    cfg = default_config()
    sections: list[str] = []

    def walk(cls: str, prefix: str, rows: list[str]) -> None:
        for name, annotation, doc in classes[cls]:
            key = f"{prefix}{name}"
            nested = annotation if annotation in classes and classes[annotation] else None
            if nested:
                walk(nested, key + ".", rows)
                continue
            value = OmegaConf.select(cfg, key, throw_on_missing=False)
            if OmegaConf.is_config(value):
                value = OmegaConf.to_container(value)
            shown = "`null`" if value is None else f"`{value!s}`".replace("|", "\\|")
            rows.append(f"| `{key}` | {shown} | {doc.replace('|', chr(92) + '|')} |")

    top = []
    for name, annotation, doc in classes["Config"]:
        if annotation in classes and classes[annotation]:
            rows: list[str] = []
            walk(annotation, name + ".", rows)
            sections.append(
                f"## `{name}`\n\n{doc}\n\n| key | default | meaning |\n| --- | --- | --- |\n" + "\n".join(rows)
            )
        else:
            value = OmegaConf.select(cfg, name, throw_on_missing=False)
            value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
            top.append(f"| `{name}` | {'`null`' if value is None else f'`{value}`'} | {doc} |")
    head = "## Top level\n\n| key | default | meaning |\n| --- | --- | --- |\n" + "\n".join(top)
    return HEADER + "\n" + "\n\n".join([head, *sections]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write docs/options.md from the configuration schema")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/options.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python scripts/options_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
