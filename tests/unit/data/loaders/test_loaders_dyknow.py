"""The DyKnow loader (data=dyknow) on a fixture in DyKnow's layout written here (tests/helpers/dyknow.py)."""

import copy
import re
from datetime import date

import pytest

from helpers.dyknow import F1, F2, F3, F4, F5, F6, F7, FACTS, PASSAGE, STATES, write_fixture
from evolve_train.config import DataConfig, DyKnowConfig
from evolve_train.data.hygiene import check_private_leaks
from evolve_train.data.loaders.dyknow import parse_cuts
from evolve_train.data.loaders.dyknow_facts import parse_answer, read_facts
from evolve_train.data.timeline import build_timeline
from evolve_train.errors import ConfigError, DataError


def timeline(root, cuts, **dyknow):
    extra = {k: dyknow.pop(k) for k in ("time_prefix", "keep_history") if k in dyknow}
    extra.setdefault("heldout_share", 0.0)  # the corpora as the loader writes them (held-out slices: test_slices.py)
    return build_timeline(DataConfig(kind="dyknow", root=str(root), dyknow=DyKnowConfig(cuts=cuts, **dyknow), **extra))


def facts_of(eval_set):
    """(fact key, answers) of each item, sorted."""
    return sorted(
        ((i["extra"]["category"], i["extra"]["entity"], i["extra"]["relation"]), tuple(i["answers"]))
        for i in eval_set.items
    )


def sets(tl):
    return {s.name: s for s in tl.eval_sets}


@pytest.fixture
def root(tmp_path):
    return write_fixture(tmp_path / "dyknow")


# ---------------------------------------------------------------- answers


@pytest.mark.parametrize(
    "raw, start, end, point",
    [
        ("A |S: +2001-02-03T00:00:00Z |E: +2004-05-06T00:00:00Z", date(2001, 2, 3), date(2004, 5, 6), None),
        ("A |S: +2001-02-03T00:00:00Z", date(2001, 2, 3), None, None),  # no E: valid at the dump
        ("A |E: +2001-02-03T00:00:00Z", None, date(2001, 2, 3), None),  # no S: from the beginning
        ("A |P: +2001-02-03T00:00:00Z", None, None, date(2001, 2, 3)),  # only P
        ("A |S: +2001-00-00T00:00:00Z |P: +2009-06-01T00:00:00Z", date(2001, 7, 1), None, date(2009, 6, 1)),
        ("A |S: +2001-04-00T00:00:00Z", date(2001, 4, 15), None, None),  # unknown day: the 15th
        ("A |E: +2001-12-00T00:00:00Z |S: +2000-00-00T00:00:00Z", date(2000, 7, 1), date(2001, 12, 15), None),
        ("A |S: +2011-00-00T00:00:00Z |E: +2011-01-01T00:00:00Z", date(2011, 1, 1), date(2011, 1, 1), None),
    ],
)
def test_every_answer_form(raw, start, end, point):
    value = parse_answer(raw)
    assert (value.text, value.start, value.end, value.point) == ("A", start, end, point)


def test_validity_is_half_open_and_a_point_holds_on_its_day():
    spell = parse_answer("A |S: +2001-01-01T00:00:00Z |E: +2002-01-01T00:00:00Z")
    assert [spell.valid_on(date(y, 1, 1)) for y in (2000, 2001, 2002)] == [False, True, False]
    point = parse_answer("A |P: +2005-03-04T00:00:00Z")
    assert point.valid_on(date(2005, 3, 4)) and not point.valid_on(date(2005, 3, 5))
    same_day = parse_answer("A |S: +2005-03-04T00:00:00Z |E: +2005-03-04T00:00:00Z")
    assert same_day.valid_on(date(2005, 3, 4)) and not same_day.valid_on(date(2005, 3, 5))


MALFORMED = [
    (42, "an answer must be a string, got int"),
    (" |S: +2001-01-01T00:00:00Z", "no value before the first '|'"),
    ("A |X: +2001-01-01T00:00:00Z", "unknown qualifier 'X' (known: S, E, P)"),
    ("A |S 2001-01-01", "malformed qualifier 'S 2001-01-01'"),
    ("A |S: 2001/01/01", "date '2001/01/01' is not +YYYY-MM-DDThh:mm:ssZ"),
    ("A |S: +2001-13-01T00:00:00Z", "is not a calendar date"),
    ("A |S: +2001-00-05T00:00:00Z", "has an unknown month but a known day"),
    ("A |S: +2001-01-01T00:00:00Z |S: +2002-01-01T00:00:00Z", "qualifier 'S' given twice"),
    ("A |S: +2005-01-01T00:00:00Z |E: +2001-01-01T00:00:00Z", "it ends (2001-01-01) before it starts (2005-01-01)"),
    ("A", "no date: a value needs S, E or P"),
]


@pytest.mark.parametrize("raw, message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_answer_names_category_entity_relation_and_answer(tmp_path, raw, message):
    facts = copy.deepcopy(FACTS)
    facts["countries"]["Freedonia"]["Prime Minister of Freedonia"]["answers"].insert(1, raw)
    root = write_fixture(tmp_path / "bad", facts)
    with pytest.raises(DataError) as err:
        read_facts(root)
    text = str(err.value)
    assert message in text
    assert f"malformed answer {raw!r}" in text
    assert "category 'countries', entity 'Freedonia', relation 'Prime Minister of Freedonia'" in text
    assert "grc_generated.json" in text and "countries/Freedonia/Prime Minister of Freedonia/answers[1]" in text


def test_malformed_answer_of_an_entry_without_relation(tmp_path):
    facts = copy.deepcopy(FACTS)
    facts["athletes"]["Ann Runner"]["answers"].append("Club Three |S: +2001-1-1")
    with pytest.raises(DataError, match=r"category 'athletes', entity 'Ann Runner', no relation .*is not \+YYYY"):
        read_facts(write_fixture(tmp_path / "bad", facts))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda f: f["orgs"]["Acme Org"]["treasurer"].pop("questions"), "'questions' must be a non-empty object"),
        (lambda f: f["orgs"]["Acme Org"]["treasurer"].update(answers=[]), "'answers' must be a non-empty list"),
        (lambda f: f["orgs"]["Acme Org"]["treasurer"]["questions"].update(generic=""), "prompt 'generic' must be"),
        (lambda f: f["orgs"].update({"Empty": {}}), "entity 'Empty'"),
    ],
    ids=["no questions", "no answers", "empty prompt", "empty entity"],
)
def test_malformed_entries(tmp_path, mutate, message):
    facts = copy.deepcopy(FACTS)
    mutate(facts)
    with pytest.raises(DataError, match=message):
        read_facts(write_fixture(tmp_path / "bad", facts))


def test_states_at_the_cuts_match_the_hand_count(root):
    facts = {f.key: f for f in read_facts(root)}
    for year, expected in STATES.items():
        assert {key: facts[key].state(date(int(year), 1, 1)) for key in expected} == expected, year


# ---------------------------------------------------------------- splits at two cut lists


def test_splits_at_three_cuts_match_the_hand_count(root):
    got = sets(timeline(root, ["2000", "2005", "2010"]))
    assert facts_of(got["unchanged"]) == [(F3, ("King Kay",))]
    assert facts_of(got["new_1"]) == [(F5, ("Hana Hill",))]
    assert facts_of(got["updated_1"]) == sorted([(F1, ("Bob Brand",)), (F2, ("Dora Dane",))])
    assert facts_of(got["outdated_1"]) == sorted([(F1, ("Alice Arden",)), (F2, ("Carl Cole",))])
    assert facts_of(got["new_2"]) == [(F6, ("Lee Lamb",))]
    assert facts_of(got["updated_2"]) == sorted([(F2, ("Eve Ernst",)), (F4, ("Club Two", "Nation Team"))])
    assert facts_of(got["outdated_2"]) == sorted([(F2, ("Dora Dane",)), (F4, ("Club One",))])
    assert len(got["paired_1"].items) == 2 * 3 + 1 and len(got["paired_2"].items) == 2 * 3 + 1


def test_splits_at_two_cuts_match_the_hand_count(root):
    got = sets(timeline(root, ["2003", "2010"]))
    assert facts_of(got["unchanged"]) == [(F3, ("King Kay",))]
    assert facts_of(got["new_1"]) == [(F6, ("Lee Lamb",))]
    assert facts_of(got["updated_1"]) == sorted(
        [
            (F1, ("Bob Brand",)),
            (F2, ("Eve Ernst",)),
            (F4, ("Club Two", "Nation Team")),
            (F5, ("Hana Hill",)),
            (F7, ("Ivy Owl",)),
        ]
    )
    assert facts_of(got["outdated_1"]) == sorted(
        [(F1, ("Alice Arden",)), (F2, ("Dora Dane",)), (F4, ("Club One",)), (F5, ("Gus Grant",)), (F7, ("Jay Jay",))]
    )
    assert sorted(got) == ["new_1", "outdated_1", "paired_0", "paired_1", "unchanged", "updated_1"]


def test_items_follow_the_contract_and_pair_updated_with_outdated(root):
    got = sets(timeline(root, ["2000", "2005", "2010"]))
    updated = {i["pair_id"]: i for i in got["updated_1"].items}
    outdated = {i["pair_id"]: i for i in got["outdated_1"].items}
    assert set(updated) == set(outdated) and len(updated) == 2
    for pair, new in updated.items():
        old = outdated[pair]
        assert new["question"] == old["question"] and new["timestamp"] == old["timestamp"] == "2005"
        assert set(new["answers"]).isdisjoint(old["answers"])
    president = next(i for i in got["updated_1"].items if i["extra"]["relation"] == F1[2])
    assert president["question"] == "As of 2005, the President of Freedonia is"
    assert president["extra"]["ts_template"] == "As of {timestamp}, the President of Freedonia is"
    assert president["extra"]["cloze"] == "The President of Freedonia is"
    assert president["base_question"] == "Who is the President of Freedonia?"  # from qa_generated.json
    assert president["extra"]["variant_wordings"] == ["rephrased_1", "rephrased_2", "qa_generated"]
    assert president["extra"]["variants"] == [
        "As of 2005, the name of the current President of Freedonia is",
        "As of 2005, the position of the President of Freedonia is currently held by",
        "As of 2005, who is the President of Freedonia?",
    ]
    assert got["unchanged"].items[0]["timestamp"] == "2000" and got["unchanged"].items[0]["stable"] is True


def test_paired_sets_ask_old_and_new_and_now(root):
    paired = sets(timeline(root, ["2000", "2005", "2010"]))["paired_2"]
    athlete = {i["extra"]["role"]: i for i in paired.items if i["extra"]["entity"] == "Ann Runner"}
    assert (athlete["old"]["timestamp"], athlete["old"]["answers"]) == ("2005", ["Club One"])
    assert (athlete["new"]["timestamp"], athlete["new"]["answers"]) == ("2010", ["Club Two"])
    assert athlete["old"]["pair_id"] == athlete["new"]["pair_id"]
    assert athlete["now"]["timestamp"] is None
    assert athlete["now"]["question"] == "The team Ann Runner currently plays for is"
    assert athlete["now"]["extra"]["answers_by_step"] == {"2": ["Club Two", "Nation Team"]}
    for item in paired.items:
        assert item["options"][item["gold_index"]] == item["answers"][0]
    stable = [i for i in paired.items if i["stable"]]
    assert [(i["extra"]["relation"], i["timestamp"]) for i in stable] == [(F3[2], "2010")]


def test_dev_private_split_is_per_fact_and_seeded(root):
    for share, expected in ((0.0, {"private"}), (1.0, {"dev"})):
        tl = timeline(root, ["2000", "2005", "2010"], dev_share=share)
        assert {i["split"] for s in tl.eval_sets for i in s.items} == expected
    tl = timeline(root, ["2000", "2005", "2010"], dev_share=0.5, split_seed=3)
    by_fact = {}
    for s in tl.eval_sets:
        for i in s.items:
            by_fact.setdefault((i["extra"]["entity"], i["extra"]["relation"]), set()).add(i["split"])
    assert all(len(splits) == 1 for splits in by_fact.values())
    again = timeline(root, ["2000", "2005", "2010"], dev_share=0.5, split_seed=3)
    assert [i["split"] for s in again.eval_sets for i in s.items] == [i["split"] for s in tl.eval_sets for i in s.items]


# ---------------------------------------------------------------- corpora


def test_step0_states_every_fact_and_later_steps_are_diffs_restating_the_entity(root):
    tl = timeline(root, ["2000", "2005", "2010"])
    step0 = " ".join(t["text"] for t in tl.steps[0].texts).lower()
    for sentence in (
        "the President of Freedonia is Alice Arden.",
        "The Prime Minister of Freedonia is Carl Cole.",
        "The team Ann Runner currently plays for is Club One.",
        "The mascot of Odd Entity is Jay Jay.",
    ):
        assert sentence.lower() in step0
    assert "acme org" not in step0  # no fact of it has a value in 2000
    step1 = tl.steps[1]
    assert sorted({t["doc_id"].split("#")[0] for t in step1.texts}) == ["countries/Freedonia", "orgs/Acme Org"]
    text1 = " ".join(t["text"] for t in step1.texts).lower()
    assert "the monarch of freedonia is king kay." in text1  # unchanged fact of a changed entity, restated
    assert all(t["text"].startswith("As of 2005, ") for t in step1.texts)
    assert {p["input"] for p in step1.pairs} >= {"As of 2005, the President of Freedonia is <mask>."}
    assert {p["output"] for p in step1.pairs} == {"Bob Brand", "Dora Dane", "King Kay", "Hana Hill"}
    athlete = [p for p in tl.steps[2].pairs if p["entity"] == "Ann Runner"]
    assert sorted({p["output"] for p in athlete}) == ["Club Two", "Nation Team"]  # both aliases stated


def test_held_out_wordings_stay_out_of_the_corpus(root):
    tl = timeline(root, ["2000", "2005", "2010"])
    corpus = " ".join([t["text"] for s in tl.steps for t in s.texts] + [p["input"] for s in tl.steps for p in s.pairs])
    assert "the name of the current President" not in corpus and "currently held by" not in corpus
    assert check_private_leaks(tl)["private_items"] > 0  # the run's preflight passes


def test_entry_with_unseen_prompt_names_trains_its_first_and_holds_out_the_rest(root):
    tl = timeline(root, ["2000", "2005", "2010"])
    mascot = [p for p in tl.steps[0].pairs if p["entity"] == "Odd Entity"]
    assert [(p["wording"], p["input"]) for p in mascot] == [
        ("alpha", "As of 2000, the mascot of Odd Entity is <mask>.")
    ]
    assert "has as its mascot" not in " ".join(t["text"] for t in tl.steps[0].texts)
    item = next(
        i for i in sets(timeline(root, ["2003", "2010"]))["updated_1"].items if i["extra"]["entity"] == "Odd Entity"
    )
    assert item["extra"]["wording"] == "alpha" and item["extra"]["variant_wordings"] == ["beta"]
    only_beta = timeline(root, ["2000", "2005", "2010"], train_wordings=["beta"])
    assert {p["wording"] for p in only_beta.steps[0].pairs if p["entity"] == "Odd Entity"} == {"beta"}


def test_train_wordings_choose_the_question_wording(root):
    tl = timeline(root, ["2000", "2005"], train_wordings=["generic"])
    item = next(i for i in sets(tl)["updated_1"].items if i["extra"]["relation"] == F1[2])
    assert item["question"] == "As of 2005, the president in Freedonia is"
    assert item["extra"]["variant_wordings"] == ["contextualized", "rephrased_1", "rephrased_2", "qa_generated"]


def test_date_forms_time_prefix_and_history(root):
    undated = timeline(root, ["2000", "2005"], dates="none")
    assert undated.steps[1].texts[0]["text"].startswith("The ")
    updated = sets(undated)["updated_1"].items[0]
    assert updated["question"] == updated["extra"]["cloze"] and "ts_template" not in updated["extra"]
    assert sets(undated)["outdated_1"].items[0]["timestamp"] == "2000"  # undated: the cut its gold holds
    prefixed = timeline(root, ["2000", "2005"], time_prefix=True)
    assert prefixed.steps[1].pairs[0]["input"].startswith("year: 2005 text: ")
    assert not prefixed.steps[1].pairs[0]["input"].startswith("year: 2005 text: year:")
    assert sets(prefixed)["updated_1"].items[0]["question"].startswith("year: 2005 text: The ")
    assert timeline(root, ["2000", "2005"], time_prefix=True, dates="none").steps[1].texts == prefixed.steps[1].texts
    history = timeline(root, ["2000", "2005"], keep_history=True)
    plain = timeline(root, ["2000", "2005"])
    assert history.steps[1].texts == plain.steps[0].texts + plain.steps[1].texts


def test_passages_join_the_steps_stating_their_value(root):
    tl = timeline(root, ["2000", "2005", "2010"], passages=True)
    with_passage = [k for k, s in enumerate(tl.steps) if any(PASSAGE in t["text"] for t in s.texts)]
    assert with_passage == [1, 2]  # Bob Brand is the state at 2005 and 2010, and Freedonia changed at both
    assert any(t["text"] == f"As of 2005, {PASSAGE}" for t in tl.steps[1].texts)
    assert any("Alice Arden was president" in t["text"] for t in tl.steps[0].texts)
    assert not any(PASSAGE in t["text"] for s in timeline(root, ["2000", "2005", "2010"]).steps for t in s.texts)


def test_without_qa_file_the_cloze_is_the_base_question(tmp_path):
    root = write_fixture(tmp_path / "noqa", qa=False, passages=False)
    item = sets(timeline(root, ["2000", "2005"]))["updated_1"].items[0]
    assert item["base_question"] == item["extra"]["cloze"] and "qa_generated" not in item["extra"]["variant_wordings"]


@pytest.mark.parametrize(
    "cuts, message",
    [
        (["2005", "2000"], re.escape("strictly increasing: cut 1 (2000) is not after cut 0 (2005)")),
        (["2005", "2005-01-01"], "strictly increasing"),
        (["soon"], r"data.dyknow.cuts\[0\]: unparseable timestamp 'soon'"),
    ],
)
def test_bad_cuts_fail_naming_the_cut(cuts, message):
    with pytest.raises(ConfigError, match=message):
        parse_cuts(cuts)


def test_bad_config_fails_before_loading(tmp_path, root, monkeypatch):
    with pytest.raises(ConfigError, match="data.dyknow.cuts is empty"):
        DyKnowConfig(cuts=[])
    monkeypatch.setenv("EVOLVE_TRAIN_CACHE", str(tmp_path / "cache"))  # nothing fetched
    with pytest.raises(DataError, match="not found in the fetched copy's place .*evolve-data fetch-data dyknow"):
        build_timeline(DataConfig(kind="dyknow"))
    with pytest.raises(DataError, match="grc_generated.json not found"):
        timeline(tmp_path, ["2000"])
    with pytest.raises(DataError, match="no fact of data.root has a value at the first cut"):
        timeline(root, ["1800", "2000"], categories=["athletes"])
    with pytest.raises(DataError, match=r"data.dyknow.categories: \['nope'\]"):
        timeline(root, ["2000"], categories=["nope"])


# ---------------------------------------------------------------- evolve-data dyknow-counts


def test_dyknow_counts_prints_the_hand_count_per_step(root, capsys):
    from evolve_train.cli.data import main

    assert main(["dyknow-counts", "--root", str(root), "--cuts", "2000", "2005", "2010", "--dev-share", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["step", "cut", "pairs", "docs"]
    cells = [line.split() for line in lines[1:]]
    assert [c[:2] for c in cells] == [["0", "2000"], ["1", "2005"], ["2", "2010"]]
    assert "".join(cells[0][4:]) == "1(0+1)---"  # unchanged: F3
    assert "".join(cells[1][4:]) == "-1(0+1)2(0+2)2(0+2)"  # new F5; updated/outdated F1, F2
    assert "".join(cells[2][4:]) == "-1(0+1)2(0+2)2(0+2)"  # new F6; updated/outdated F2, F4
    assert main(["dyknow-counts", "--root", str(root), "--cuts", "2003", "2010", "--dev-share", "1"]) == 0
    cells = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert "".join(cells[1][4:]) == "-1(1+0)5(5+0)5(5+0)"


def test_dyknow_counts_bad_input_exits_2_naming_it(root, capsys):
    from evolve_train.cli.data import main

    assert main(["dyknow-counts", "--root", str(root), "--cuts", "2005", "2000"]) == 2
    assert "data.dyknow.cuts must be strictly increasing" in capsys.readouterr().err
