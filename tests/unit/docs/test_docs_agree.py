"""README.md and docs/ say what the code does: each test pins one statement of the docs to the code behind it."""

from __future__ import annotations

import re
from pathlib import Path


ROOT = Path(__file__).resolve().parents[3]


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def squash(text: str) -> str:
    """Markdown text with its line breaks and runs of spaces as single spaces (a phrase may wrap)."""
    return re.sub(r"\s+", " ", text)


def test_the_console_names_the_model_before_training_initial():
    from evolve_train.tracking.console import format_checkpoint

    rows = [{"group": "splits", "set": "unchanged", "set_step": None, "em": 0.5}]
    assert format_checkpoint(-1, rows) == "[checkpoint initial] EM  unchanged=0.500"
    assert format_checkpoint(2, rows).startswith("[checkpoint 2] EM")


def test_the_docs_call_the_base_model_checkpoint_initial_and_its_rows_minus_one():
    readme = squash(read("README.md"))
    assert "checkpoint `initial`" in readme and "checkpoint `init`" not in readme
    outputs = squash(read("docs/outputs.md"))
    assert "`-1` = the initial model" in outputs and "`step_-1`" in outputs


NEVER_UNDER_SLURM = re.compile(r"never ran under SLURM|Not run: real SLURM|real SLURM: NCCL|Awaiting [^.]*real SLURM")


def a_test_file(name: str) -> bool:
    """Whether tests/ holds a file of that name (in whichever folder of tests/ it lives)."""
    return any((ROOT / "tests").rglob(name))


def test_every_page_says_the_slurm_template_ran_on_a_real_one_node_cluster():
    assert (ROOT / "scripts" / "slurm" / "local_cluster.sh").is_file() and a_test_file("test_slurm_cluster.py")
    for page in ("README.md", "docs/methods.md", "docs/distributed.md", "docs/reliability.md"):
        text = squash(read(page))
        assert not NEVER_UNDER_SLURM.search(text), page
        assert "local_cluster.sh" in text, page
    for page in ("docs/methods.md", "docs/distributed.md"):
        text = squash(read(page))
        assert "several nodes" in text and "test_slurm_cluster.py" in text, page


FIGURE = re.compile(r"-?\d+\.\d{3}\b")


TABLE_ROW = re.compile(r"^(ckpt|initial|\d+)\s{2,}")


def readme_demo_block() -> list[str]:
    section = read("README.md").split("## The demo's output", 1)[1]
    return section.split("```\n", 2)[1].rstrip("\n").splitlines()


def readme_demo_reading() -> str:
    """The README's paragraph right after the demo block."""
    section = read("README.md").split("## The demo's output", 1)[1]
    return section.split("```\n", 2)[2].strip().split("\n\n")[0]


def demo_page_lines_section() -> str:
    text = read("docs/results/demo.md")
    return text.split("## Every line of the demo output", 1)[1].split("\n## ", 1)[0]


def printed_names(block: list[str]) -> set[str]:
    """The line headings and the `name=` keys of the demo block (a step's number in a set name as `_k`)."""
    names = set()
    for line in block:
        names |= {re.sub(r"_\d+$", "_k", key) for key in re.findall(r"([A-Za-z_]\w*)=", line)}
        if not (line[:1].isspace() or line[:1].isdigit() or TABLE_ROW.match(line)):
            names.add(re.split(r" @|:| \(|=", line, maxsplit=1)[0].strip())
    return names


def test_the_demo_page_explains_every_line_of_the_readme_block():
    block = readme_demo_block()
    assert block[0].startswith("EM by checkpoint") and block[-1].startswith("demo check")
    names = printed_names(block)
    assert {"EM by checkpoint", "paired", "update_adoption", "new_k", "heldout_general", "compute"} <= names
    section = demo_page_lines_section()
    missing = sorted(name for name in names if name not in section)
    assert not missing, f"docs/results/demo.md 'Every line of the demo output' does not explain {missing}"
    for unit in ("nats", "perplexity", "seconds", "FLOPs", "fractions from 0 to 1"):
        assert unit in section, unit


def test_the_demo_figures_are_in_one_place():
    section = demo_page_lines_section()
    assert not FIGURE.findall(section), "the demo page quotes figures of the run: they belong in the README block"
    assert "README" in section
    block = "\n".join(readme_demo_block())
    quoted = FIGURE.findall(readme_demo_reading())
    assert quoted and all(figure in block for figure in quoted), quoted
    readme = squash(read("README.md"))
    assert "docs/results/demo.md#every-line-of-the-demo-output" in readme


def test_the_readme_states_the_torch_pin_and_how_to_choose_the_cpu_build():
    pinned = re.search(r"TORCH_VERSION:-([\d.]+)", read("scripts/setup.sh")).group(1)
    readme = squash(read("README.md"))
    assert f"torch=={pinned}" in readme
    assert f"pip install torch=={pinned} --index-url https://download.pytorch.org/whl/cpu" in readme
    assert "CUDA build" in readme and f"pins `torch=={pinned}` (CPU" not in readme


def test_the_readme_says_parallel_jobs_each_train_step_0():
    import inspect

    from evolve_train.training import step0_cache

    assert "lock" not in inspect.getsource(step0_cache).lower(), "the step-0 cache locks now: update the docs"
    readme = squash(read("README.md"))
    assert "trains step 0 once" not in readme
    assert "by each of the parallel jobs that start before it is stored" in readme
    assert "Parallel jobs (SLURM) that both miss simply both train" in squash(read("docs/methods.md"))


def lora_lm_eval_section() -> str:
    return read("docs/evaluation.md").split("### LoRA checkpoints and `lm_eval`", 1)[1].split("\n## ", 1)[0]


def test_a_lora_step_after_0_saves_no_weights_and_the_docs_say_so():
    from types import SimpleNamespace

    from evolve_train.methods.lora import LoRA

    def saves(step: int, save_merged: bool) -> bool:
        return LoRA.saves_weights(
            SimpleNamespace(cfg=SimpleNamespace(lora=SimpleNamespace(save_merged=save_merged))), step
        )

    assert saves(0, False) and not saves(1, False) and not saves(2, False) and saves(2, True)
    assert "save_merged: false" in read("configs/method/lora.yaml")
    outputs = squash(read("docs/outputs.md"))
    assert (
        "a LoRA step after step 0 (`method.lora.save_merged=false`, the default) holds no `model.safetensors`"
        in outputs
    )
    evaluation = squash(read("docs/evaluation.md"))
    assert "pretrained=steps/<k-1>,peft=steps/<k>/adapter" not in evaluation
    section = squash(lora_lm_eval_section())
    assert "pretrained=RUN/steps/0,peft=RUN/steps/1/adapter" in section and "k ≥ 2" in section
