"""Raw STS12-16 / SICK-R / STS-B readers and the multi-task STS evaluation, on small files in the real formats."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from test_eval_fakes import HashEncoder
from layerwise.data.sts import read_sick, read_sts_raw, read_sts_year, sts_subsets
from layerwise.errors import DataError
from layerwise.evaluation.sts import evaluate_subsets, evaluate_tasks, parse_tasks

SUBSETS = {
    "STS12-en-test": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    "STS13-en-test": ["FNWN", "headlines", "OnWN"],
    "STS14-en-test": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "STS15-en-test": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "STS16-en-test": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}
WORDS = ("man woman dog cat plays guitar runs park eats food reads book sings song drives car "
         "swims river cooks pasta paints wall climbs tree").split()


def make_pairs(seed: int, n: int = 6) -> list[tuple[str, str, float]]:
    """Pairs whose word overlap grows with the score, and a quote or two in the text."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = list(rng.choice(WORDS, size=6, replace=False))
        keep = i % 6
        other = words[:keep] + list(rng.choice(WORDS, size=6 - keep))
        first = " ".join(words) + ("." if i % 2 else ' "quoted".')
        out.append((first, " ".join(other) + ".", round(5.0 * keep / 5, 3)))
    return out


def write_sts_dir(root: Path) -> Path:
    """STS12-16 folders, SICK (CRLF, header) and STS-B test, each in its release's format."""
    for y, (folder, subsets) in enumerate(SUBSETS.items()):
        (root / folder).mkdir(parents=True)
        prefix = "STS2016." if folder.startswith("STS16") else "STS."
        for s, subset in enumerate(subsets):
            pairs = make_pairs(100 * y + s)
            inputs, golds = [], []
            for i, (a, b, score) in enumerate(pairs):
                extra = "\tsrc-a\tsrc-b" if prefix == "STS2016." else ""
                inputs.append(f"{a}\t{b}{extra}")
                unscored = folder[:5] in ("STS15", "STS16") and i == 2
                golds.append("" if unscored else f"{score}")
            (root / folder / f"{prefix}input.{subset}.txt").write_text("\n".join(inputs) + "\n", encoding="utf-8")
            (root / folder / f"{prefix}gs.{subset}.txt").write_text("\n".join(golds) + "\n", encoding="utf-8")
    (root / "SICK").mkdir()
    rows = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
    rows += [f"{i}\t{a}\t{b}\t{1 + 0.8 * score:.1f}\tNEUTRAL" for i, (a, b, score) in enumerate(make_pairs(7, 8))]
    (root / "SICK" / "SICK_test_annotated.txt").write_bytes(("\r\n".join(rows) + "\r\n").encode())
    (root / "stsbenchmark").mkdir()
    rows = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{score:.3f}\t{a}\t{b}" + ("\tx\ty" if i % 3 == 0 else "")
            for i, (a, b, score) in enumerate(make_pairs(9, 8))]
    (root / "stsbenchmark" / "sts-test.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def sts_dir(tmp_path) -> Path:
    return write_sts_dir(tmp_path / "sts")


def test_subset_discovery_both_prefixes(sts_dir):
    assert list(sts_subsets(sts_dir / "STS12-en-test")) == sorted(SUBSETS["STS12-en-test"])
    found = sts_subsets(sts_dir / "STS16-en-test")
    assert set(found) == set(SUBSETS["STS16-en-test"])
    assert found["headlines"][0].name == "STS2016.input.headlines.txt"


def test_empty_gold_lines_skipped_and_4_columns(sts_dir):
    year = read_sts_year(sts_dir / "STS16-en-test")
    pairs = year["plagiarism"]
    assert len(pairs) == 5  # 6 lines, one unscored
    assert all("\t" not in s and "src" not in s for s in pairs.sentences2)
    assert len(read_sts_year(sts_dir / "STS12-en-test")["MSRpar"]) == 6


def test_sick_crlf_header(sts_dir):
    pairs = read_sick(sts_dir / "SICK" / "SICK_test_annotated.txt")
    assert len(pairs) == 8
    assert not any(s.endswith("\r") for s in pairs.sentences2)
    assert pairs.scores.min() >= 1.0


def test_gold_line_count_mismatch(tmp_path):
    (tmp_path / "STS.input.x.txt").write_text("a\tb\nc\td\n")
    (tmp_path / "STS.gs.x.txt").write_text("1.0\n")
    with pytest.raises(DataError, match=r"STS.gs.x.txt:2: has 1 lines but its input file .* has 2"):
        read_sts_raw(tmp_path / "STS.input.x.txt", tmp_path / "STS.gs.x.txt")


def test_gold_bad_score(tmp_path):
    (tmp_path / "STS.input.x.txt").write_text("a\tb\nc\td\n")
    (tmp_path / "STS.gs.x.txt").write_text("1.0\nhigh\n")
    with pytest.raises(DataError, match=r"STS.gs.x.txt:2: expected a numeric score, got 'high'"):
        read_sts_raw(tmp_path / "STS.input.x.txt", tmp_path / "STS.gs.x.txt")


def test_all_and_wmean_hand_checked():
    from layerwise.data.sts import StsPairs

    enc = HashEncoder()
    a = StsPairs(["a b c", "d e", "f g h"], ["a b c", "x", "f g"], np.array([5.0, 0.0, 3.0]))
    b = StsPairs(["k l", "m n o p", "q"], ["k", "m n o p", "z"], np.array([2.0, 4.0, 1.0, ]))
    b.sentences1.append("r s")
    b.sentences2.append("t u")
    b.scores = np.array([2.0, 4.0, 1.0, 0.5])
    res = evaluate_subsets(enc, {"a": a, "b": b})
    sa, sb = res["subsets"]["a"]["spearman"], res["subsets"]["b"]["spearman"]
    assert res["wmean"]["spearman"] == pytest.approx((3 * sa + 4 * sb) / 7)
    assert res["all"]["n"] == 7 and res["spearman"] == res["all"]["spearman"]


def test_evaluate_tasks_all_present(sts_dir):
    tasks = parse_tasks("sts12,sts13,sts14,sts15,sts16,stsb,sickr")
    out = evaluate_tasks(HashEncoder(), sts_dir, tasks)
    assert set(out["tasks"]) == set(tasks)
    assert out["tasks"]["sts15"]["n"] == 25 and set(out["tasks"]["sts14"]["subsets"]) == set(SUBSETS["STS14-en-test"])
    assert out["avg"] == pytest.approx(np.mean([out["tasks"][t]["spearman"] for t in tasks]))
    json.dumps(out)


def test_parse_tasks_unknown():
    from layerwise.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown STS task 'sts21'.*expected one of"):
        parse_tasks("sts21")
