"""Validate the knowledge-cutoff estimators (docs/metrics.md#14-knowledge-cutoff) on others' released evidence;
nothing of it is bundled, every path is an argument. Prints Markdown tables (docs/results/knowledge_cutoff.md).

    python scripts/cutoff_validation.py --tic-lm OR/*/ppl_evals/aggregated_ppl_evals.jsonl
    python scripts/cutoff_validation.py --dyknow DYKNOW_DIR     # grc_generated.json and models_output/<model>/

TiC-LM: each file is one oracle's ``<name with cutoffYYYYMM>/ppl_evals/aggregated_ppl_evals.jsonl``; the
reference is the oracle with the latest cutoff; every other (oracle, domain) is a case whose true cutoff slice
is the one labelled with its cutoff month. It prints the hinge rule and the largest jump per case, and
the summary of both with the variants tried on the same cases: the hinge unweighted, on slice positions,
without its no-cutoff rule and with a step; the jump divided by its standard error, and the first jump whose
95 % interval is above 0.

DyKnow: per model, the current-value step and the answered-year mode from the stored answer sheets and dates
(models with no dates: the generated answers judged by ``match_value``), beside the stated training cutoff.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from evolve_train.data.loaders.cutoff_evidence import read_dyknow_answers, read_tic_lm_evals
from evolve_train.data.loaders.dyknow_facts import read_facts
from evolve_train.evaluation.metrics.cutoff import (
    CutoffEstimate,
    DatedAnswer,
    LossRow,
    answer_year,
    current_value_year,
    hinge_cutoff,
    pooled_jump_cutoff,
    slice_cutoff,
)

STATED = {
    "gpt2-xl": (
        "2017-12",
        '[GPT-2 model card](https://github.com/openai/gpt-2/blob/master/model_card.md): "data that cuts off at the end of 2017"',
    ),
    "gpt-j-6B": (
        "2020",
        '[model card](https://huggingface.co/EleutherAI/gpt-j-6b): "trained on the Pile", no date; [Pile paper](https://arxiv.org/abs/2101.00027) released 2020-12',
    ),
    "t5-3b": (
        "2019-04",
        '[model card](https://huggingface.co/google-t5/t5-3b) (C4) and [T5 paper](https://arxiv.org/abs/1910.10683): "web extracted text from April 2019"',
    ),
    "flan-t5-xl": (
        "2019-04",
        '[model card](https://huggingface.co/google/flan-t5-xl) (based on T5) and [T5 paper](https://arxiv.org/abs/1910.10683): C4 "web extracted text from April 2019"',
    ),
    "bloom-7b1": (
        "not stated",
        "not found in the [model card](https://huggingface.co/bigscience/bloom-7b1) (training dates 2022-03 to 2022-07 only)",
    ),
    "falcon-7b": (
        "not stated",
        "not found in the [model card](https://huggingface.co/tiiuae/falcon-7b) (RefinedWeb, no date)",
    ),
    "falcon-7b-instruct": (
        "not stated",
        "not found in the [model card](https://huggingface.co/tiiuae/falcon-7b-instruct) (Falcon-7B tuned on chat data)",
    ),
    "OLMo-1B": (
        "2023-03",
        '[model card](https://huggingface.co/allenai/OLMo-1B-hf): date cutoff "Feb./March 2023" (Dolma)',
    ),
    "OLMo-7B": (
        "2023-03",
        '[model card](https://huggingface.co/allenai/OLMo-7B-hf): date cutoff "Feb./March 2023" (Dolma)',
    ),
    "OpenELM-270M": (
        "not stated",
        "not found in the [model card](https://huggingface.co/apple/OpenELM-270M) (RefinedWeb, PILE, RedPajama, Dolma v1.6 subsets)",
    ),
    "OpenELM-1_1B": (
        "not stated",
        "not found in the [model card](https://huggingface.co/apple/OpenELM-1_1B) (data sets named, no date)",
    ),
    "OpenELM-3B": (
        "not stated",
        "not found in the [model card](https://huggingface.co/apple/OpenELM-3B) (data sets named, no date)",
    ),
    "llama2-7b": (
        "2022-09",
        '[Llama 2 model card](https://github.com/meta-llama/llama-models/blob/main/models/llama2/MODEL_CARD.md): pretraining data "cutoff of September 2022"',
    ),
    "llama2-7b-chat": (
        "2022-09",
        '[Llama 2 model card](https://github.com/meta-llama/llama-models/blob/main/models/llama2/MODEL_CARD.md): pretraining 2022-09, "some tuning data ... up to July 2023"',
    ),
    "vicuna-7b-v1.5": (
        "2022-09",
        '[model card](https://huggingface.co/lmsys/vicuna-7b-v1.5) ("fine-tuning Llama 2") and [Llama 2 card](https://github.com/meta-llama/llama-models/blob/main/models/llama2/MODEL_CARD.md)',
    ),
    "Meta-Llama-3-8B": (
        "2023-03",
        '[Llama 3 model card](https://github.com/meta-llama/llama3/blob/main/MODEL_CARD.md): knowledge cutoff "March, 2023" (8B)',
    ),
    "Mistral-7B-v0.1": (
        "not stated",
        "not found in the [model card](https://huggingface.co/mistralai/Mistral-7B-v0.1)",
    ),
    "Mistral-7B-Instruct-v0.1": (
        "not stated",
        "not found in the [model card](https://huggingface.co/mistralai/Mistral-7B-Instruct-v0.1)",
    ),
    "Mixtral-8x7B-v0.1": (
        "not stated",
        "not found in the [model card](https://huggingface.co/mistralai/Mixtral-8x7B-v0.1)",
    ),
    "Mixtral-8x7B-Instruct-v0.1": (
        "not stated",
        "not found in the [model card](https://huggingface.co/mistralai/Mixtral-8x7B-Instruct-v0.1)",
    ),
    "davinci-002": (
        "2021-09",
        '[OpenAI model page](https://developers.openai.com/api/docs/models/davinci-002.md): "Sep 01, 2021 knowledge cutoff"',
    ),
    "gpt-3.5-turbo-1106": (
        "2021-09",
        '[OpenAI model page](https://developers.openai.com/api/docs/models/gpt-3.5-turbo.md): "Sep 01, 2021 knowledge cutoff"',
    ),
    "gpt-4-1106-preview": (
        "2023-04",
        "[OpenRouter listing](https://openrouter.ai/openai/gpt-4-1106-preview): \"Training data: up to April 2023\" (OpenAI's GPT-4 Turbo page now shows Dec 2023 for every snapshot, later than this one's release on 2023-11-06)",
    ),
}


def _md(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _cutoff_of(name: str) -> str:
    match = re.search(r"cutoff_?(\d{6})", name)
    if not match:
        raise SystemExit(f"{name}: no cutoffYYYYMM in the model's folder name")
    return match.group(1)


def _gap_and_se(row: LossRow, ref: Optional[LossRow]) -> tuple[np.ndarray, np.ndarray]:
    if ref is None:
        return row.means, row.stderr
    return row.means - ref.means, np.sqrt(row.stderr**2 + ref.stderr**2)


def variant_z(gap: np.ndarray, se: np.ndarray) -> int:
    """Variant: the largest jump divided by its standard error."""
    return int(np.argmax(np.diff(gap) / np.sqrt(se[1:] ** 2 + se[:-1] ** 2)))


def variant_first(gap: np.ndarray, se: np.ndarray) -> int:
    """Variant: the first jump whose 95 % interval is above 0 (-1: none)."""
    above = np.nonzero(np.diff(gap) - 1.96 * np.sqrt(se[1:] ** 2 + se[:-1] ** 2) > 0)[0]
    return int(above[0]) if len(above) else -1


def hinge_variants(row: LossRow, slices: list, reference: Optional[LossRow], B: int, seed: int):
    """(name, estimate) of the hinge rule and its variants named in docs/metrics.md#14-knowledge-cutoff."""
    yield "hinge", hinge_cutoff(row, slices, reference, B=B, seed=seed)
    yield "hinge unweighted", hinge_cutoff(row, slices, reference, B=B, seed=seed, weighted=False)
    yield "hinge on slice positions", hinge_cutoff(row, slices, reference, B=B, seed=seed, times=range(len(slices)))
    yield "hinge, point (no 'none' rule)", hinge_cutoff(row, slices, reference, B=0, seed=seed, test=False)
    yield "step plus hinge", hinge_cutoff(row, slices, reference, B=B, seed=seed, step=True)


def _label(est: CutoffEstimate) -> str:
    if not est.found:
        return "none"
    return f"{est.estimate} [{est.lo}, {est.hi}]" if est.lo is not None else str(est.estimate)


def _score(index: Optional[int], truth: int) -> tuple[bool, bool]:
    if index is None or index < 0:
        return False, False
    return index == truth, abs(index - truth) <= 1


def tic_lm(paths: list[Path], B: int, seed: int) -> None:
    matrices = read_tic_lm_evals(paths)
    counts: dict[str, list[int]] = {}
    rows = []

    def tally(name: str, index: Optional[int], truth: int) -> str:
        exact, near = _score(index, truth)
        count = counts.setdefault(name, [0, 0, 0])
        count[0] += exact
        count[1] += near
        count[2] += 1
        return "exact" if exact else ("±1" if near else "off")

    def index_of(est: CutoffEstimate) -> Optional[int]:
        return matrix.slices.index(est.estimate) if est.found else None

    for domain, matrix in matrices.items():
        ref = max(matrix.rows, key=lambda r: _cutoff_of(r.name))
        for row in matrix.rows:
            if row is ref:
                continue
            truth = matrix.slices.index(_cutoff_of(row.name))
            cells = [domain, row.name, matrix.slices[truth]]
            for tag, reference in (("ref", ref), ("raw", None)):
                for name, est in hinge_variants(row, matrix.slices, reference, B, seed):
                    mark = tally(f"{name}, {tag}", index_of(est), truth)
                    if name == "hinge":
                        cells += [_label(est), mark]
            for tag, reference in (("ref", ref), ("raw", None)):
                est = slice_cutoff(row, matrix.slices, reference, B=B, seed=seed, rule="jump")
                cells += [_label(est), tally(f"largest jump, {tag}", index_of(est), truth)]
                gap, se = _gap_and_se(row, reference)
                point = matrix.slices.index(est.before) if est.before is not None else None
                tally(f"largest jump, point (no 'none' rule), {tag}", point, truth)
                for name, fn in (("jump / its SE", variant_z), ("first significant jump", variant_first)):
                    tally(f"{name}, {tag}", fn(gap, se), truth)
            rows.append(cells)
    pooled = _pooled(matrices, B, seed, tally)
    header = ["domain", "model", "true cutoff", "hinge, reference", "", "hinge, raw", ""]
    header += ["largest jump, reference", "", "largest jump, raw", ""]
    print(_md(header, rows), end="\n\n")
    print(_md(["model", "true cutoff", "pooled jump, reference", "", "pooled jump, raw", ""], pooled), end="\n\n")
    summary = [[name, f"{c[0]} / {c[2]}", f"{c[1]} / {c[2]}"] for name, c in counts.items()]
    print(_md(["estimator, evidence", "exact", "within one slice"], summary), end="\n\n")


def _pooled(matrices: dict, B: int, seed: int, tally: Callable) -> list[list[str]]:
    """Per model, :func:`pooled_jump_cutoff` over its domains; each of its (model, domain) cases is tallied
    with the model's one estimate, so the counts are over the same cases as the per-domain rules."""
    first = next(iter(matrices.values()))
    refs = {domain: max(m.rows, key=lambda r: _cutoff_of(r.name)) for domain, m in matrices.items()}
    if any(m.slices != first.slices for m in matrices.values()):
        raise SystemExit("pooling over domains needs the same slices in every domain")
    reference = max(first.rows, key=lambda r: _cutoff_of(r.name)).name
    out = []
    for name in [r.name for r in first.rows if r.name != reference]:
        evidence = [(m.row(name), refs[d]) for d, m in matrices.items()]
        truth = first.slices.index(_cutoff_of(name))
        cells = [name, first.slices[truth]]
        for tag, pairs in (("ref", evidence), ("raw", [(row, None) for row, _ in evidence])):
            est = pooled_jump_cutoff(pairs, first.slices, B=B, seed=seed)
            point = first.slices.index(est.before) if est.before is not None else None
            for _ in pairs:
                mark = tally(f"largest jump / its sd, pooled over domains, {tag}", _index(est, first.slices), truth)
                tally(f"pooled, point (no 'none' rule), {tag}", point, truth)
            cells += [_label(est), mark]
        out.append(cells)
    return out


def _index(est: CutoffEstimate, slices: list) -> Optional[int]:
    return slices.index(est.estimate) if est.found else None


def _judge_agreement(model_dir: Path, facts, B: int, seed: int) -> Optional[list[str]]:
    """Share of the sheet's judged prompts where the matcher's judgement (correct / outdated / neither) equals
    the sheet's, and the current-value step from the matcher's judgements (None without a sheet)."""
    if not list(model_dir.glob("*_answer_sheet.json")):
        return None
    stored = {(a.fact, a.prompt): a.current for a in read_dyknow_answers(model_dir, facts)}
    judged = read_dyknow_answers(model_dir, facts, judge=True)
    same = [stored[(a.fact, a.prompt)] == a.current for a in judged if (a.fact, a.prompt) in stored]
    share = f"{np.mean(same):.3f} of {len(same)}" if same else "-"
    return [share, _label(current_value_year(judged, B=B, seed=seed))]


def _answers_of(model_dir: Path, facts) -> tuple[list[DatedAnswer], str]:
    if list(model_dir.glob("*_dates.json")):
        return read_dyknow_answers(model_dir, facts), "stored sheet + dates"
    return read_dyknow_answers(model_dir, facts, judge=True), "judged by matching"


def _year_cell(est: CutoffEstimate, what: Callable[[CutoffEstimate], str]) -> str:
    return _label(est) if est.found else f"none ({what(est)})"


def dyknow(root: Path, B: int, seed: int) -> None:
    facts = read_facts(root, qa=False)
    rows, agreement = [], []
    for model_dir in sorted(p for p in (root / "models_output").iterdir() if p.is_dir()):
        answers, source = _answers_of(model_dir, facts)
        step = current_value_year(answers, B=B, seed=seed)
        mode = answer_year(answers, B=B, seed=seed)
        stated, where = STATED.get(model_dir.name, ("not stated", "-"))
        rows.append(
            [
                model_dir.name,
                source,
                str(step.n),
                _year_cell(step, lambda e: f"tested {e.before}" if e.before else "no drop"),
                _year_cell(mode, lambda e: f"mode {e.before}" if e.before else e.reason),
                stated,
                where,
            ]
        )
        check = _judge_agreement(model_dir, facts, B, seed)
        if check is not None:
            agreement.append([model_dir.name, *check])
    header = ["model", "evidence", "facts", "current-value step", "answered-year mode", "stated cutoff", "source"]
    print(_md(header, rows), end="\n\n")
    header = ["model", "matcher = sheet (per prompt)", "current-value step, matcher"]
    print(_md(header, agreement), end="\n\n")


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tic-lm", nargs="+", type=Path, default=[], help="aggregated_ppl_evals.jsonl files")
    parser.add_argument("--dyknow", type=Path, help="DyKnow folder (grc_generated.json, models_output/)")
    parser.add_argument("--B", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.tic_lm and not args.dyknow:
        parser.error("give --tic-lm files, --dyknow or both")
    if args.tic_lm:
        tic_lm(args.tic_lm, args.B, args.seed)
    if args.dyknow:
        dyknow(args.dyknow, args.B, args.seed)


if __name__ == "__main__":
    main()
