"""Agreement with a teacher's pairwise preferences (``score --pairs``): the pair file's errors, ties and
the pairs left out, against counts made by hand."""

import json

import numpy as np
import pytest

from omnidistill.data.preference_file import Preference, read_preferences
from omnidistill.data.schema import DataError
from omnidistill.eval.preferences import preference_agreement


def test_a_tie_in_the_students_scores_counts_as_wrong_and_pairs_left_out_are_counted():
    scores = {"a": np.array([4.0, 4, 4, 4]), "b": np.array([2.0, 2, 2, 5]), "c": np.array([4.0, 4, 4, 4])}
    pairs = [
        Preference("a", "b", "a"),  # overall 4 > 2.75: right; faithfulness 4 < 5: wrong
        Preference("a", "c", "c"),  # equal everywhere: a tie, wrong
        Preference("b", "c", "b"),  # overall 2.75 < 4: wrong; faithfulness 5 > 4: right
        Preference("a", "b", None),  # the judges tied: left out
        Preference("a", "zz", "zz"),  # zz was not scored: left out
    ]
    got = preference_agreement(pairs, scores, {"a": "qa", "b": "qa", "c": "mt", "zz": "qa"})
    assert got["overall"] == {"pairs": 3, "correct": 1, "ties": 1, "accuracy": 1 / 3}
    assert got["by_dimension"]["faithfulness"] == {"pairs": 3, "correct": 1, "ties": 1, "accuracy": 1 / 3}
    assert got["by_dimension"]["clarity"] == {"pairs": 3, "correct": 1, "ties": 1, "accuracy": 1 / 3}
    assert (got["pair_lines"], got["judges_tied"], got["not_scored"], got["missing_examples"]) == (5, 1, 1, ["zz"])
    assert got["by_task"] == {  # the winner's task
        "mt": {"pairs": 1, "correct": 0, "ties": 1, "accuracy": 0.0},
        "qa": {"pairs": 2, "correct": 1, "ties": 0, "accuracy": 0.5},
    }
    none = preference_agreement([Preference("a", "b", None)], scores)
    assert none["overall"] == {"pairs": 0, "correct": 0, "ties": 0, "accuracy": None}


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", r":2: invalid JSON"),
        ('{"id_a": "x", "winner": "x"}', r":2: no id_b \(a pair line of label --pairwise has id_a, id_b and winner\)"),
        ('{"id_a": "x", "id_b": "y", "winner": "z"}', r":2: winner 'z' is neither id_a 'x' nor id_b 'y'"),
        ('{"id_a": "x", "id_b": "x", "winner": "x"}', r":2: id_a and id_b are both 'x'"),
        ('{"id_a": null, "id_b": "y", "winner": "y"}', r":2: id_a must be an id, got None"),
        ("[1, 2]", r":2: expected a JSON object"),
    ],
)
def test_a_malformed_pair_line_is_named_by_file_and_line(tmp_path, line, message):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"id_a": 1, "id_b": 2, "winner": 2}) + "\n" + line + "\n\n")
    with pytest.raises(DataError, match=message):
        read_preferences(path)
    path.write_text(json.dumps({"id_a": 1, "id_b": 2, "winner": 2}) + "\n\n")  # numbers are ids as text, as records' are
    assert read_preferences(path) == [Preference("1", "2", "2")]
    with pytest.raises(DataError, match="file not found"):
        read_preferences(tmp_path / "missing.jsonl")


def test_a_dimension_a_judge_did_not_score_leaves_its_pairs_out_of_that_dimension_and_of_the_overall():
    """Another judge's labels (``eval --compare``) may leave a dimension null (NaN): the pair is left out
    of that dimension and of the mean of the four, and counted in the others."""
    scores = {"a": np.array([5.0, np.nan, 5, 5]), "b": np.array([1.0, 2, 1, 1]), "c": np.array([3.0, 3, 3, 3])}
    got = preference_agreement([Preference("a", "b", "a"), Preference("c", "b", "c")], scores)
    assert got["overall"] == {"pairs": 1, "correct": 1, "ties": 0, "accuracy": 1.0}
    assert got["by_dimension"]["clarity"] == {"pairs": 1, "correct": 1, "ties": 0, "accuracy": 1.0}
    assert got["by_dimension"]["informativeness"]["pairs"] == 2
