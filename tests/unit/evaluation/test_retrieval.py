"""The open-book evaluator (docs/metrics.md#10-open-book-evaluation) on a hand-built three-step timeline.

The model is a stub reader (``ctx.answers`` replaced): it answers with the last word of the first line of the
prompt, i.e. of the best retrieved passage, so every number here is hand-computed from which passages BM25
returns. The end-to-end run with a real tiny model is in tests/e2e/test_retrieval_run.py.
"""

import json

import pytest

from evolve_train.config import EvalConfig, RetrievalConfig
from evolve_train.data.timeline import EvalSet, Timeline, TimeStep
from evolve_train.errors import ConfigError, DataError
from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluator import evaluate_checkpoint
from evolve_train.evaluation.metrics.answer import contains_answer, recall_at_k
from evolve_train.evaluation.retrieval_index import RetrievalIndex, load_passage_files, sentences

DOCS = {
    0: ["The director of Acme is Ann. Acme was founded in 1900.", "The director of Brix is Cal."],
    1: ["The director of Acme is Bob.", "The director of Dune is Eve."],
    2: ["The director of Brix is Fay.", "Gale Street hosts the Wren Prize."],
}


def item(key, set_kind, step, question, answer):
    return {"id": key, "question": question, "answers": [answer], "set": set_kind, "step": step}


SETS = [
    EvalSet("unchanged", "unchanged", None, [item("u", "unchanged", None, "Acme was founded in", "1900")]),
    EvalSet(
        "new_1",
        "new",
        1,
        [
            item("n-dune", "new", 1, "The director of Dune is", "Eve"),
            item("n-zeta", "new", 1, "The director of Zeta is", "Ugo"),
        ],
    ),
    EvalSet("updated_1", "updated", 1, [item("a", "updated", 1, "The director of Acme is", "Bob")]),
    EvalSet("outdated_1", "outdated", 1, [item("a", "outdated", 1, "The director of Acme is", "Ann")]),
    EvalSet("updated_2", "updated", 2, [item("b", "updated", 2, "The director of Brix is", "Fay")]),
    EvalSet("outdated_2", "outdated", 2, [item("b", "outdated", 2, "The director of Brix is", "Cal")]),
    EvalSet("new_2", "new", 2, [item("w", "new", 2, "Gale Street hosts the", "Wren Prize")]),
]


def timeline():
    steps = [
        TimeStep(k, str(2018 + k), texts=[{"doc_id": f"d{n}", "text": t} for n, t in enumerate(DOCS[k])]) for k in DOCS
    ]
    return Timeline(steps=steps, eval_sets=SETS)


def reader(prompts):
    """The stub model: the last word of the prompt's first line (the best passage), else nothing."""
    return [" " + (p.split("\n")[0].split() or [""])[-1].rstrip(".") for p in prompts]


TIMELINE = timeline()


def context(checkpoint, shared=None, **retrieval):
    cfg = EvalConfig(evaluators=["retrieval"], retrieval=RetrievalConfig(**retrieval), eval_initial=True)
    ctx = EvalContext(timeline=TIMELINE, checkpoint=checkpoint, cfg=cfg, shared={} if shared is None else shared)
    ctx.answers = reader
    return ctx


def run(checkpoint, shared=None, **retrieval):
    return [r for r in evaluate_checkpoint(context(checkpoint, shared, **retrieval)) if r["group"] == "retrieval"]


def by_name(rows, store=None):
    return {r["set_name"]: r for r in rows if store is None or r["store"] == store}


# ---------------------------------------------------------------- the metric


def test_contains_answer_normalizes_and_matches_whole_tokens():
    assert contains_answer(["[2019] The director of Acme is Bob."], ["bob"]) == 1
    assert contains_answer(["The director is Bobby."], ["Bob"]) == 0  # whole tokens, not a substring
    assert contains_answer(["Leader: the Wren  Prize!"], ["wren prize"]) == 1  # §1 normalization both sides
    assert contains_answer(["nothing"], ["x", "nothing"]) == 1  # any alias
    assert contains_answer(["a the an"], ["The"]) == 0  # an alias that normalizes to nothing never occurs
    assert contains_answer([], ["Bob"]) == 0


def test_recall_at_k_hand_computed():
    retrieved = [["Acme is led by Bob."], ["Dune: Eve", "Acme: Bob"], [], ["Cal"]]
    assert recall_at_k(retrieved, [["Bob"], ["Eve"], ["Eve"], ["Fay"]]) == pytest.approx(2 / 4)
    assert recall_at_k([], []) is None
    with pytest.raises(ValueError):
        recall_at_k([["x"]], [])


# ---------------------------------------------------------------- the store


def test_no_passage_of_a_later_step_is_ever_retrieved():
    tl = timeline()
    index = RetrievalIndex(tl, RetrievalConfig(k=6))
    later_texts = [t for k in DOCS for t in DOCS[k]]  # every passage's own text as a query: the best match
    for checkpoint in range(3):
        store = index.store(checkpoint)
        assert {p.step for p in store.passages} == set(range(checkpoint + 1))
        for found in store.search(later_texts, k=6):
            assert all(p.step <= checkpoint for p, _ in found)
    for checkpoint in range(3):  # and in every row's per-question records of the evaluator
        rows = run(checkpoint, k=3)
        assert rows and all(r["store"] == checkpoint for r in rows)


def test_records_name_only_passages_of_steps_up_to_the_store(tmp_path):
    for checkpoint in (-1, 0, 1, 2):
        ctx = context(checkpoint, k=3)
        ctx.run_dir = tmp_path
        evaluate_checkpoint(ctx)
    files = sorted((tmp_path / "predictions").rglob("*.jsonl"))
    assert len(files) > 10
    for path in files:
        step_dir, folder = path.parts[-3], path.parts[-2]
        store = (
            int(folder.removeprefix("open_book_store"))
            if folder.startswith("open_book_store")
            else int(step_dir.removeprefix("step_"))
        )
        for record in map(json.loads, path.read_text().splitlines()):
            assert all(p["step"] <= store for p in record["retrieved"]), (path, record)


def test_recall_at_k_equals_the_hand_computation():
    # checkpoint 1, scope all, k = 2: the store is steps 0-1 (4 passages). Stop words dropped, the queries are
    # unchanged {acme, founded} -> 0/d0 (both words; 1900) and 1/d0 (acme): hit
    # new_1 dune {director, dune} -> 1/d1 (Eve) first: hit; zeta {director, zeta}: only "director" passages,
    #   none names Ugo: miss
    # updated_1 / outdated_1 {director, acme} -> both Acme passages (Ann in 0/d0, Bob in 1/d0): hit, hit
    rows = by_name(run(1, k=2))
    names = ("unchanged", "new_1", "updated_1", "outdated_1")
    assert [rows[name]["recall@k"] for name in names] == [1.0, 0.5, 1.0, 1.0]
    assert rows["all"]["recall@k"] == pytest.approx(3 / 4)  # Unchanged + New + Updated pooled: 3 of 4 questions
    assert rows["all"]["n"] == 4 and rows["new_1"]["n_hit"] == 1 and rows["new_1"]["k"] == 2
    assert "updated_2" not in rows  # a later step's set is not asked


def test_a_gold_occurring_verbatim_in_one_passage_is_retrieved_at_k_1(tmp_path):
    ctx = context(1, k=1)
    ctx.run_dir = tmp_path
    rows = by_name([r for r in evaluate_checkpoint(ctx) if r["group"] == "retrieval"])
    record = json.loads((tmp_path / "predictions/step_1/open_book/new_1.jsonl").read_text().splitlines()[0])
    assert record["id"] == "n-dune" and [p["id"] for p in record["retrieved"]] == ["1/d1"]  # "... Dune is Eve."
    assert record["hit"] == 1 and record["prediction"] == "Eve" and record["correct"] == 1
    assert record["prompt"] == "[2019] The director of Dune is Eve.\nThe director of Dune is"  # the template
    assert rows["new_1"]["em_open"] == 0.5  # the stub reads Eve; Zeta's passage names no Ugo
    assert rows["new_1"]["em"] == 0.0  # closed book the stub reads the question: "is"


def test_scope_latest_holds_only_the_checkpoint_step():
    latest, every = by_name(run(1, k=2, scope="latest")), by_name(run(1, k=2, scope="all"))
    # the founding year is told at step 0 only: out of step 1's store
    assert latest["unchanged"]["recall@k"] == 0.0 and every["unchanged"]["recall@k"] == 1.0
    # the stale answer (Ann, step 0) is out of reach of the latest snapshot; the current one (Bob) is not
    assert latest["outdated_1"]["recall@k"] == 0.0 and latest["updated_1"]["recall@k"] == 1.0
    assert latest["all"]["scope"] == "latest" and every["all"]["scope"] == "all"
    index = RetrievalIndex(timeline(), RetrievalConfig(scope="latest"))
    assert {p.step for p in index.store(1).passages} == {1}


def test_initial_model_is_asked_at_every_store_and_the_index_is_built_once():
    shared = {}
    initial = run(-1, shared, k=2)
    assert sorted({r["store"] for r in initial}) == [0, 1, 2]
    assert "updated_1" not in by_name(initial, store=0) and "updated_2" in by_name(initial, store=2)
    assert all(r["checkpoint"] == -1 for r in initial)
    assert by_name(initial, store=0)["all"]["index_seconds"] > 0
    again = run(2, shared, k=2)  # the stores exist: nothing is built again
    assert by_name(again)["all"]["index_seconds"] == 0.0 and by_name(again)["all"]["retrieval_seconds"] >= 0
    assert by_name(again)["updated_2"]["em_open"] == by_name(initial, store=2)["updated_2"]["em_open"]
    assert run(-1, k=2, initial_every_store=False) == []


def test_no_shared_word_retrieves_nothing_and_keeps_the_question():
    tl = timeline()
    store = RetrievalIndex(tl, RetrievalConfig()).store(2)
    assert store.search(["zzz qqq", "the of is"], k=3) == [[], []]  # unknown words, stop words only
    assert len(store.search(["Wren"], k=3)[0]) == 1


# ---------------------------------------------------------------- passages


def test_sentences_split_documents_and_carry_the_step_date():
    assert sentences("A b. C d! E f? g") == ["A b.", "C d!", "E f?", "g"]
    index = RetrievalIndex(timeline(), RetrievalConfig(passages="sentences"))
    first = index.by_step[0]
    assert [p.text for p in first] == [
        "The director of Acme is Ann.",
        "Acme was founded in 1900.",
        "The director of Brix is Cal.",
    ]
    assert {p.date for p in first} == {"2018"} and first[1].id == "0/d0#1"


def test_pairs_only_steps_give_their_filled_in_inputs():
    steps = [TimeStep(0, "2018", pairs=[{"input": "The head of Acme is <mask>.", "output": "Ann"}])]
    index = RetrievalIndex(Timeline(steps=steps, eval_sets=[]), RetrievalConfig())
    assert [p.text for p in index.by_step[0]] == ["The head of Acme is Ann."]


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_passage_files_one_per_step_or_one_with_steps(tmp_path):
    steps = timeline().steps
    files = [write(tmp_path / f"p{k}.jsonl", [{"text": f"Passage of step {k}."}]) for k in range(3)]
    per_step = load_passage_files(files, steps)
    assert [[(p.step, p.date) for p in ps] for ps in per_step] == [[(0, "2018")], [(1, "2019")], [(2, "2020")]]
    one = write(
        tmp_path / "all.jsonl",
        [{"text": "x one", "step": "2019", "date": "2019-06-01", "id": "a"}, {"text": "x two", "step": 2}],
    )
    per_step = load_passage_files([one], steps)
    assert [len(ps) for ps in per_step] == [0, 1, 1]
    assert per_step[1][0].date == "2019-06-01" and per_step[1][0].id == "a"
    cfg = RetrievalConfig(passages="files", passage_files=[one])
    assert RetrievalIndex(timeline(), cfg).store(0).passages == []  # step 0 has no passage: nothing to find


@pytest.mark.parametrize(
    "records, field",
    [
        ([{"text": "ok", "step": 0}, {"txt": "no"}], "text"),
        ([{"text": "ok", "step": 7}], "step"),
        ([{"text": "no step"}], "step"),
    ],
)
def test_a_bad_passage_record_names_file_line_and_field(tmp_path, records, field):
    path = write(tmp_path / "bad.jsonl", records)
    with pytest.raises(DataError) as err:
        load_passage_files([path], timeline().steps)
    assert "bad.jsonl" in str(err.value) and f"field '{field}'" in str(err.value) and "line" in str(err.value)


def test_passage_file_count_and_presence_are_checked(tmp_path):
    one = write(tmp_path / "p.jsonl", [{"text": "a b", "step": 0}])
    with pytest.raises(ConfigError, match="2 files for 3 time steps"):
        load_passage_files([one, one], timeline().steps)
    with pytest.raises(ConfigError, match="is not a file"):
        load_passage_files([str(tmp_path / "missing.jsonl")], timeline().steps)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"passages": "files"}, "passage_files"),
        ({"passage_files": ["x.jsonl"]}, "passage_files"),
        ({"template": "{passages} only"}, "{question}"),
        ({"passage_template": "{date}"}, "{text}"),
        ({"template": "{passages} {question} {nope}"}, "format string"),
        ({"k": 0}, "eval.retrieval.k"),
        ({"scope": "future"}, "eval.retrieval.scope"),
    ],
)
def test_bad_retrieval_settings_name_the_key(settings, message):
    with pytest.raises(ConfigError, match="eval.retrieval") as err:
        RetrievalConfig(**settings)
    assert message in str(err.value)


# ---------------------------------------------------------------- paired metrics open-book


def dated_timeline():
    texts = {0: "In 2018, the director of Acme is Ann.", 1: "In 2019, the director of Acme is Bob."}
    steps = [TimeStep(k, str(2018 + k), texts=[{"doc_id": "d", "text": texts[k]}]) for k in texts]
    probes = [
        {
            "id": f"p-{year}",
            "question": f"In {year}, the director of Acme is",
            "answers": [gold],
            "set": "paired",
            "step": 1,
            "timestamp": str(year),
            "pair_id": "p",
        }
        for year, gold in ((2018, "Ann"), (2019, "Bob"))
    ]
    return Timeline(steps=steps, eval_sets=[EvalSet("paired_1", "paired", 1, probes)])


@pytest.mark.parametrize("scope, adoption, confusion", [("all", 1.0, 0.0), ("latest", 0.0, 0.5)])
def test_paired_metrics_open_book(scope, adoption, confusion):
    # all: each dated question retrieves its own year's passage first (the year is a shared word): both right.
    # latest: the 2019 store alone; the 2018 question reads Bob, the newer answer: one confusion in two.
    cfg = EvalConfig(evaluators=["retrieval"], retrieval=RetrievalConfig(k=1, scope=scope))
    ctx = EvalContext(timeline=dated_timeline(), checkpoint=1, cfg=cfg)
    ctx.answers = reader
    rows = by_name([r for r in evaluate_checkpoint(ctx) if r["group"] == "retrieval"])
    for name in ("paired_1", "paired_all"):
        assert rows[name]["set"] == "paired" and rows[name]["n_pairs"] == 1 and rows[name]["store"] == 1
        assert rows[name]["update_adoption"] == adoption and rows[name]["confusion_index"] == confusion
    off = EvalConfig(evaluators=["retrieval"], retrieval=RetrievalConfig(k=1, paired=False))
    ctx = EvalContext(timeline=dated_timeline(), checkpoint=1, cfg=off)
    ctx.answers = reader
    assert not [r for r in evaluate_checkpoint(ctx) if r.get("set") == "paired"]


# ---------------------------------------------------------------- the model's positions


def test_passages_are_cut_to_fit_the_model_positions():
    from evolve_train.config import ModelConfig
    from evolve_train.evaluation.evaluators.retrieval import OpenBookPrompts
    from evolve_train.models.build import build_text_format, build_model, train_tokenizer

    long_docs = [" ".join(["The director of Acme is Bob and the museum opens at noon."] * 6)]
    tokenizer = train_tokenizer(long_docs + [t for k in DOCS for t in DOCS[k]], 300)
    model_cfg = ModelConfig(n_layer=1, n_embd=32, n_head=2, vocab_size=300, n_positions=48)
    model = build_model(model_cfg, tokenizer)
    text_format = build_text_format(model_cfg, tokenizer)
    steps = [
        TimeStep(
            0,
            "2018",
            texts=[{"doc_id": "long", "text": long_docs[0]}]
            + [{"doc_id": f"d{n}", "text": t} for n, t in enumerate(DOCS[0])],
        )
    ]
    tl = Timeline(steps=steps, eval_sets=[SETS[0], EvalSet("updated_0", "updated", 0, SETS[2].items)])
    cfg = EvalConfig(evaluators=["retrieval"], max_new_tokens=6, retrieval=RetrievalConfig(k=3))
    ctx = EvalContext(timeline=tl, checkpoint=0, cfg=cfg, model=model, text_format=text_format)
    prompts = OpenBookPrompts(ctx)
    index = RetrievalIndex(tl, cfg.retrieval)
    for question in ("The director of Acme is", "Acme was founded in"):
        found = [p for p, _ in index.store(0).search([question], 3)[0]]
        prompt, cut = prompts.build(question, found)
        assert len(text_format.prompt_ids([prompt])[0]) + 6 <= 48 and cut
        assert prompt.endswith("\n" + question)
    rows = by_name([r for r in evaluate_checkpoint(ctx) if r["group"] == "retrieval"])  # the real tiny model
    assert rows["all"]["cut"] == 1.0 and rows["all"]["n"] == 2
    uncut = OpenBookPrompts(EvalContext(timeline=tl, checkpoint=0, cfg=cfg))  # no model: nothing to fit
    assert uncut.build("Q", found) == ("\n".join(f"[2018] {p.text}" for p in found) + "\nQ", False)
