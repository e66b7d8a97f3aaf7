"""Multi-process evaluation in whole batches (evaluation/context.py: ``Shards``), without a process group.

Every process gets whole batches of the plan one process would form (``TextFormat.generation_batches`` /
``option_batches``), so its forward passes are the ones a single process runs. Checked here for a causal
(tiny GPT-2) and a seq2seq (tiny T5) adapter:

* the planned batches are the ones ``generate`` and ``score_options`` run, and any selection of whole
  batches, planned on its own, forms the same batches again;
* the processes' loads stay within one batch of each other over a checkpoint's calls;
* answers and option scores computed by 2 and 3 simulated processes (threads whose ``gather`` exchanges
  values) equal the one-process results bit for bit (``==``); a split that ignores the batches agrees
  only to rounding (whether padding to another length moves the last float digits depends on the CPU's
  kernels, so no test asserts that it does);
* a prompt cut to fit the model scores the same whatever else its call scores.

The 2-process runs with real gloo process groups are in tests/distributed/test_fsdp.py.
"""

from __future__ import annotations

import functools
import itertools
import threading

import pytest
import torch
from helpers.models import tiny_model

from evolve_train.config import ModelConfig
from evolve_train.evaluation.context import EvalContext, Shards
from evolve_train.models.text_format import CausalLMFormat, Seq2SeqFormat
from evolve_train.models.build import build_model, train_tokenizer
from helpers.shards import BATCH, Locked, ThreadShards, World, context

WORDS = ["Acme", "Brix Works", "Cal Dee", "the toolkit", "City4", "Person7", "Zeta Labs", "version 3"]
PROMPTS = [" ".join(WORDS[k % len(WORDS)] for k in range(i, i + 1 + (7 * i) % 5)) + " is" for i in range(13)]
PROMPTS += ["Who directs Acme?", "Q: Where is Zeta Labs based?\nA:"]
OPTIONS = ["Ann Lee", "Bob", "Brix Works of City4", "2018", "Cal Dee and Person7 of Zeta Labs"]
QUESTIONS = [(p, [OPTIONS[(i + k) % len(OPTIONS)] for k in range(1 + i % 4)]) for i, p in enumerate(PROMPTS)]
TEXTS = [f"{p} {o}." for p, options in QUESTIONS for o in options] * 5


@pytest.fixture(scope="module", params=["gpt2", "t5"])
def setup(request):
    """(adapter, model) of a tiny untrained model of each kind."""
    if request.param == "gpt2":
        tokenizer = train_tokenizer(TEXTS, vocab_size=400)
        return CausalLMFormat(tokenizer), tiny_model("gpt2", tokenizer)
    tokenizer = train_tokenizer(TEXTS, 200, "t5")
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="t5", n_layer=1, n_embd=32, n_head=2, vocab_size=200), tokenizer)
    return Seq2SeqFormat(tokenizer), model.eval()


def requests_of(questions) -> list[tuple[str, str]]:
    return sorted({(p, o) for p, options in questions for o in options})  # as EvalContext.option_scores asks


def subsets(batches: list[list]):
    for n in range(1, len(batches) + 1):
        yield from itertools.combinations(batches, n)


def test_any_selection_of_whole_batches_is_planned_as_the_same_batches(setup):
    text_format, _ = setup
    prompts, requests = sorted(PROMPTS), requests_of(QUESTIONS)
    for plan, items in ((text_format.generation_batches, prompts), (text_format.option_batches, requests)):
        batches = plan(items, BATCH)
        assert len(batches) >= 4 and sorted(x for b in batches for x in b) == sorted(items)
        for chosen in subsets(batches):
            assert plan([x for b in chosen for x in b], BATCH) == list(chosen)


def test_generation_batches_are_the_batches_generate_runs(setup):
    text_format, model = setup
    seen = []
    original = text_format._greedy

    def record(model, input_ids, attention_mask, **options):
        seen.append(input_ids.tolist())
        return original(model, input_ids, attention_mask, **options)

    text_format._greedy = record
    try:
        text_format.generate(model, sorted(PROMPTS), batch_size=BATCH, max_new_tokens=2)
    finally:
        del text_format._greedy
    planned = text_format.generation_batches(sorted(PROMPTS), BATCH)
    assert [len(ids) for ids in seen] == [len(b) for b in planned]
    pad = text_format.pad_id
    assert [[[t for t in row if t != pad] for row in ids] for ids in seen] == [
        [[t for t in row if t != pad] for row in text_format.prompt_ids(b)] for b in planned
    ]


def test_option_batches_are_the_batches_score_options_runs(setup):
    text_format, model = setup
    requests, rows = requests_of(QUESTIONS), []
    original = model.forward

    @functools.wraps(original)
    def forward(*args, **kwargs):
        rows.append(kwargs["input_ids"].shape[0])
        return original(*args, **kwargs)

    model.forward = forward
    try:
        text_format.score_options(model, requests, batch_size=BATCH)
    finally:
        del model.forward
    passes = rows[1::2] if isinstance(text_format, CausalLMFormat) else rows  # causal: prompts, then their options
    assert passes == [len(batch) for batch in text_format.option_batches(requests, BATCH)]


@pytest.mark.parametrize("count", [2, 3])
def test_owners_keep_the_loads_within_one_batch(count):
    calls = [[25], [12], [6], [60], [32], [70], [80], [130, 129, 128, 95], [75], [100]]  # a checkpoint's calls
    shards = [Shards(index, count) for index in range(count)]
    owners = [[s.owners(sizes) for sizes in calls] for s in shards]
    assert all(o == owners[0] for o in owners)  # every process computes the same owners
    load = shards[0].done_per_process()
    assert load == [
        sum(n for sizes, o in zip(calls, owners[0]) for n, r in zip(sizes, o) if r == rank) for rank in range(count)
    ]
    assert sum(load) == sum(map(sum, calls)) and max(load) - min(load) <= 130


def ask(ctx: EvalContext) -> list:
    """A checkpoint's calls: some answers, option scores, more answers (part of them known), known scores."""
    return [
        ctx.answers(PROMPTS[:6]),
        ctx.option_scores(QUESTIONS),
        ctx.answers(PROMPTS),
        ctx.option_scores(QUESTIONS[::2]),
    ]


def in_processes(count: int, text_format, model) -> tuple[list, list[EvalContext]]:
    """``ask`` on ``count`` simulated processes: each one's results and context."""
    world = World(count)
    contexts = [
        context(Locked(text_format, world.model_lock), model, ThreadShards(i, count, world=world)) for i in range(count)
    ]
    results, errors = [None] * count, []

    def process(index: int) -> None:
        try:
            results[index] = ask(contexts[index])
        except BaseException as err:  # noqa: BLE001  (re-raised in the test's thread)
            errors.append(err)
            world.barrier.abort()

    threads = [threading.Thread(target=process, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results, contexts


@pytest.mark.parametrize("count", [2, 3])
def test_processes_answer_and_score_bit_for_bit_as_one(setup, count):
    text_format, model = setup
    reference = ask(context(text_format, model, Shards()))
    results, contexts = in_processes(count, text_format, model)
    for result in results:
        assert result == reference  # exact: strings and floats
    load = contexts[0].shards.done_per_process()
    assert all(ctx.shards.done_per_process() == load for ctx in contexts)
    assert sum(load) == len(PROMPTS) + len(requests_of(QUESTIONS)) and min(load) > 0


def test_one_process_generates_and_scores_everything_in_one_call_without_a_plan(setup):
    text_format, model = setup
    calls = []

    class Spy:
        def __getattr__(self, name):
            value = getattr(text_format, name)
            return lambda *args, **kwargs: calls.append(name) or value(*args, **kwargs)

    ctx = context(Spy(), model, Shards())
    ctx.answers(PROMPTS)
    ctx.option_scores(QUESTIONS)
    assert calls == ["generate", "score_options"] and Shards().gather(5) == [5]


def test_a_split_that_ignores_the_batches_agrees_to_rounding(setup):
    """Contiguous halves form other batches than the whole call: on some CPUs (kernel choices) that moves
    the last float digits, on others it does not. Only agreement to rounding can be asserted here; exact
    equality is what whole-batch sharding guarantees (the tests above)."""
    text_format, model = setup
    requests = requests_of(QUESTIONS)
    whole = text_format.score_options(model, requests, batch_size=BATCH)
    cut = len(requests) // 2 + 1  # contiguous halves of the requests, as before whole batches
    halves = text_format.score_options(model, requests[:cut], batch_size=BATCH) + text_format.score_options(
        model, requests[cut:], batch_size=BATCH
    )
    assert halves == pytest.approx(whole, rel=1e-5)


def test_a_cut_prompt_scores_the_same_whatever_else_the_call_scores():
    tokenizer = train_tokenizer(TEXTS, vocab_size=400)
    text_format, model = CausalLMFormat(tokenizer), tiny_model("gpt2", tokenizer)
    long = " ".join(PROMPTS)  # beyond the model's 64 positions: cut from its left
    assert len(text_format.prompt_ids([long])[0]) > model.config.n_positions
    alone = text_format.score_options(model, [(long, "Bob")], batch_size=1)
    other = (PROMPTS[0], " ".join(OPTIONS))  # a long option in the same call
    assert text_format.score_options(model, [(long, "Bob"), other], batch_size=1)[0] == alone[0]
