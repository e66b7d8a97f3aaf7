"""docs/metrics.md#1-answer-matching answer matching, and the metric registry."""

import pytest

from evolve_train.evaluation.metrics import (
    cut_at_stop,
    exact_match,
    f1,
    get_metric,
    list_metrics,
    normalize,
    register_metric,
)
from evolve_train.evaluation.metrics.registry import UnknownMetricError


def test_normalize_follows_squad_with_nfkc_first():
    # lowercase, punctuation dropped, article dropped, whitespace collapsed
    assert normalize("  The  Eiffel-Tower!! ") == "eiffeltower"
    # NFKC: fullwidth letters and the "ﬁ" ligature become ASCII before lowercasing/article removal
    assert normalize("Ｔｈｅ ﬁnal") == "final"
    # no-break space becomes a space (and is collapsed)
    assert normalize("New\u00a0York") == "new york"
    assert exact_match("New\u00a0York", "new york") == 1


def test_articles_are_removed_as_whole_words_only():
    # "an" and "a" go; "Anna", "theater", "banana" keep their letters
    assert normalize("Theater an Anna a banana") == "theater anna banana"
    assert normalize("A.B.") == "ab"  # punctuation first: "ab" is not an article


def test_exact_match_single_string_and_alias_list():
    assert exact_match("barack obama", "Barack Obama.") == 1
    assert exact_match("Obama", ["Barack Obama", "obama"]) == 1
    assert exact_match("Biden", ["Barack Obama", "Obama"]) == 0
    assert exact_match("anything", []) == 0


def test_f1_counts_overlap_as_a_multiset():
    # pred x y y, gold y y z: Counter overlap = 2 → P = 2/3, R = 2/3 → F1 = 2/3
    # (a set overlap would give {y} → 1/3)
    assert f1("x y y", "y y z") == pytest.approx(2 / 3)
    # pred paris paris paris, gold paris: overlap 1 → P = 1/3, R = 1 → F1 = 2·(1/3)/(4/3) = 0.5
    assert f1("paris paris paris", "paris") == pytest.approx(0.5)


def test_f1_takes_the_best_alias():
    # alias "Obama": P = 1/2, R = 1 → 2/3
    # alias "Barack H. Obama" → "barack h obama": overlap 2, P = 1, R = 2/3 → 2·(2/3)/(5/3) = 0.8
    assert f1("barack obama", ["Obama", "Barack H. Obama"]) == pytest.approx(0.8)


def test_f1_empty_token_lists():
    assert f1("the", "a!") == 1.0  # both normalize to no tokens → 1
    assert f1("", "paris") == 0.0  # only the prediction empty → 0
    assert f1("paris", "?!") == 0.0  # only the gold empty → 0
    assert f1("rome", "paris") == 0.0  # no overlap


def test_cut_at_stop_uses_the_earliest_stop():
    assert cut_at_stop("Paris\nQuestion: next") == "Paris"  # default stop: newline
    # "</s>" is listed first but the newline comes earlier in the text
    assert cut_at_stop("ab\ncd</s>", ["</s>", "\n"]) == "ab"
    assert cut_at_stop("Paris</s>x\ny", ["</s>", "\n"]) == "Paris"
    assert cut_at_stop("no stop here", ["</s>", ""]) == "no stop here"


SENTENCE_END = r"(?<!^[A-Z])(?<![\s.][A-Z])\.(?:\s|$)"  # configs/experiment/dyknow.yaml's stop pattern


def test_a_stop_pattern_cuts_at_a_sentence_end_but_not_at_an_initial():
    from evolve_train.evaluation.metrics.answer import prediction_of

    stops = ["\n", ", "]
    assert prediction_of(" A. P. J. Abdul Kalam. He was", stops, [SENTENCE_END]) == "A. P. J. Abdul Kalam"
    assert prediction_of(" George W. Bush, who", stops, [SENTENCE_END]) == "George W. Bush"
    assert prediction_of("\n Sergio Mattarella.", stops, [SENTENCE_END]) == "Sergio Mattarella"
    assert prediction_of(" A. P. J. Abdul Kalam. He", stops + [". "]) == "A"  # what a literal ". " does
    assert prediction_of(" Paris. Berlin", ["\n"]) == "Paris. Berlin"  # no pattern: unchanged


def test_a_stop_pattern_that_is_not_a_regular_expression_is_a_config_error():
    from evolve_train.config import EvalConfig
    from evolve_train.errors import ConfigError

    with pytest.raises(ConfigError, match=r"eval.stop_patterns\[1\]: '\(' is not a regular expression"):
        EvalConfig(stop_patterns=["x", "("])


def test_registry_resolves_names_and_lists_known_ones_on_error():
    assert get_metric("exact_match") is exact_match
    assert get_metric("f1")("x b", "b") == pytest.approx(2 / 3)  # P = 1/2, R = 1
    assert "paired_bootstrap_diff" in list_metrics()
    with pytest.raises(UnknownMetricError, match=r"unknown metric 'emm'.*exact_match"):
        get_metric("emm")


def test_register_metric_decorator_and_conflicts():
    @register_metric("test_only_len")
    def length(prediction, golds):
        return len(prediction)

    assert get_metric("test_only_len")("abc", []) == 3
    with pytest.raises(ValueError, match="already registered"):
        register_metric("exact_match")(lambda p, g: 0)
