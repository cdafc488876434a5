"""reproduce: tables (mean/std, paired test against scipy), plan keys and dependencies, the runner's skip / resume /
failure bookkeeping on a fake grid, dry-run listings and the paper-scale configs. No training here (see
test_reproduce_train.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from layerwise.cli import main
from layerwise.reproduce.plan import RunSpec, fmt_seconds, shard
from layerwise.reproduce.pooling import PoolingGrid, PoolingOptions
from layerwise.reproduce.runner import FAILURES, dry_run, run_grid, summarize
from layerwise.reproduce.tables import fmt_cell, fmt_p, fmt_signed, markdown, mean_std, paired_test
from tiny import write_tiny_data

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    root = write_tiny_data(tmp_path_factory.mktemp("data"))
    rows = ['"a man plays","the man is playing","no dog"', '"a cat sits","cat on the grass","a man runs"',
            '"two dogs","dog","no people"', '"the sun","good sun","rain"']
    (root / "nli_for_simcse.csv").write_text("sent0,sent1,hard_neg\n" + "\n".join(rows) + "\n", encoding="utf-8")
    (root / "wiki1m_for_simcse.txt").write_text("a man plays\nthe dog runs\nthe sun\ngood rain\n", encoding="utf-8")
    return root


# ------------------------------------------------------------------------------------------------ tables
def test_paired_test_matches_scipy_on_a_hand_example():
    attendout = {0: 31.2, 1: 29.8, 2: 33.0, 3: 30.1, 4: 32.4, 5: 30.9}
    standard = {0: 30.0, 1: 29.9, 2: 31.1, 3: 28.7, 4: 31.0, 5: 30.2, 9: 50.0}  # seed 9 has no pair: left out
    result = paired_test(attendout, standard)
    x, y = [attendout[s] for s in range(6)], [standard[s] for s in range(6)]
    expected = stats.ttest_rel(x, y)
    assert result["n"] == 6 and result["seeds"] == list(range(6))
    assert result["t"] == pytest.approx(expected.statistic) and result["p_ttest"] == pytest.approx(expected.pvalue)
    assert result["mean_diff"] == pytest.approx(np.mean(np.subtract(x, y)))
    assert result["p_wilcoxon"] == pytest.approx(stats.wilcoxon(x, y).pvalue)
    five = paired_test({s: attendout[s] for s in range(5)}, standard)
    assert five["p_wilcoxon"] is None and five["p_ttest"] is not None  # Wilcoxon only from 6 pairs
    # why 6: the most extreme 5 pairs give an exact two-sided p of 0.0625 (never significant), 6 pairs 0.03125
    assert stats.wilcoxon(range(1, 6), [0] * 5).pvalue == pytest.approx(0.0625)
    assert stats.wilcoxon(range(1, 7), [0] * 6).pvalue == pytest.approx(0.03125)
    single = paired_test({0: 1.0}, {0: 2.0})
    assert single["p_ttest"] is None and fmt_p(single["p_ttest"]) == "n/a"
    assert paired_test({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0})["p_ttest"] is None  # identical: no p, not a crash
    shifted = paired_test({0: 3.0, 1: 4.0}, {0: 1.0, 1: 2.0})  # every difference +2: t infinite, no p of 0
    assert shifted["mean_diff"] == 2.0 and shifted["p_ttest"] is None and shifted["t"] is None
    rte = paired_test({0: 158 / 277 * 100, 1: 161 / 277 * 100}, {0: 160 / 277 * 100, 1: 163 / 277 * 100})
    assert rte["p_ttest"] is None and rte["t"] is None  # the same 2-example gap, equal up to rounding: no p of 1e-15
    assert rte["mean_diff"] == pytest.approx(-200 / 277)
    close = paired_test({0: 58.1, 1: 57.4}, {0: 58.8, 1: 58.1 + 1e-6})  # a real, if tiny, spread: tested
    assert close["p_ttest"] is not None


def test_signed_differences_never_print_minus_zero():
    assert fmt_signed(-3.5e-15) == "+0.00" and fmt_signed(-0.004) == "+0.00"  # a zero gap in float, not "-0.00"
    assert fmt_signed(-0.456) == "-0.46" and fmt_signed(0.17) == "+0.17"
    assert fmt_signed(-1e-9, plus=False) == "0.00" and fmt_signed(-0.79, plus=False) == "-0.79"


def test_mean_std_cells_and_markdown():
    stat = mean_std([86.7, 86.9, 86.5])
    assert stat["mean"] == pytest.approx(86.7) and stat["std"] == pytest.approx(np.std([86.7, 86.9, 86.5], ddof=1))
    assert fmt_cell(stat) == "86.70 ± 0.20" and fmt_cell(mean_std([80.0])) == "80.00" and fmt_cell(None) == "-"
    assert mean_std([]) ["n"] == 0
    table = markdown(["pooler", "STS-B", "note"], [["a|b", "1.00", "x"]])
    lines = table.splitlines()
    assert lines[0] == "| pooler | STS-B | note |" and lines[1] == "| --- | ---: | ---: |"
    assert lines[2] == "| a\\|b | 1.00 | x |" and table.endswith("\n")
    assert fmt_seconds(30) == "30 s" and fmt_seconds(600) == "10 min" and fmt_seconds(7200) == "2.0 h"


def test_shard_keeps_groups_together():
    specs = [RunSpec("embed", f"n{i}", s, None, group=f"g{i}") for i in range(3) for s in range(2)]
    first, second = shard(specs, "0/2"), shard(specs, "1/2")
    assert {s.group for s in first} == {"g0", "g2"} and {s.group for s in second} == {"g1"}
    with pytest.raises(Exception, match="K/N"):
        shard(specs, "2/2")


# ---------------------------------------------------------------------------------------------- the plan
def _grid(tiny_bert, data, out, **kw) -> PoolingGrid:
    opts = PoolingOptions(model=str(tiny_bert), data_dir=str(data), output_dir=str(out), **kw)
    return PoolingGrid(opts, overrides=["train.batch_size=4"], log=lambda *_: None)


def _fake_eval(run_dir: Path, dev: float) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    scores = {"stsb_dev": {"spearman": dev}, "stsb_test": {"spearman": dev - 5}}
    (run_dir / "eval.json").write_text(json.dumps({"trained": {"full": scores, "static": scores},
                                                   "untrained": {"stsb_test": {"spearman": 1.0}},
                                                   "steps": 10, "train_seconds": 20.0}), encoding="utf-8")
    (run_dir / "extras.json").write_text(json.dumps({"full": {"space": {"alignment": 0.2, "uniformity": -2.0}}}))


def test_keys_are_stable_and_ignore_device_output_and_data_dir(tiny_bert, tiny_data, tmp_path):
    import shutil

    moved = shutil.copytree(tiny_data, tmp_path / "moved-data")
    a = _grid(tiny_bert, tiny_data, tmp_path / "a", poolers=["avg_last"], objectives=["supervised"]).plan()
    b = _grid(tiny_bert, moved, tmp_path / "b", poolers=["avg_last"], objectives=["supervised"],
              device="cpu").plan()
    assert [s.key for s in a] == [s.key for s in b]
    assert b[0].config.data_dir == str(moved)  # the run still reads the data where it now lies
    assert a[0].key.startswith("embed-sup-avg_last-seed0-") and len(a[0].hash) == 12
    assert len({s.key for s in a}) == 3  # seeds 0, 1, 2
    c = _grid(tiny_bert, tiny_data, tmp_path / "a", poolers=["avg_last"], objectives=["supervised"], max_steps=7)
    assert c.plan()[0].key != a[0].key  # a setting that changes the run changes the key


def test_pooler_lr_tuned_on_seed0_dev_then_used_by_other_seeds(tiny_bert, tiny_data, tmp_path):
    grid = _grid(tiny_bert, tiny_data, tmp_path, poolers=["layer_att_cls"], objectives=["supervised"], seeds=2,
                 pooler_lrs=[1e-4, 1e-3, 1e-2])
    specs = grid.plan()
    tune = [s for s in specs if "tune" in s.roles]
    assert [s.meta["pooler_lr"] for s in tune] == [1e-4, 1e-3, 1e-2] and all(s.seed == 0 for s in tune)
    waiting = [s for s in specs if s.pending]
    assert [s.seed for s in waiting] == [1]  # seed 0's main run is one of the tuning runs
    for spec, dev in zip(tune, (80.0, 84.0, 82.0)):
        _fake_eval(spec.run_dir(tmp_path), dev)
    specs = grid.plan()
    main_runs = [s for s in specs if "main" in s.roles]
    assert [(s.seed, s.meta["pooler_lr"]) for s in main_runs] == [(0, 1e-3), (1, 1e-3)]
    assert "tune" in main_runs[0].roles and main_runs[0].key == tune[1].key
    assert not any(s.pending for s in specs)
    grid.report()
    md = (tmp_path / "pooling.md").read_text(encoding="utf-8")
    assert "supervised/layer_att_cls: 0.001 (dev by lr: 0.0001: 80.00, 0.001: 84.00, 0.01: 82.00)" in md
    assert "| supervised | layer_att_cls | full | 0.001 | 84.00 | 79.00 | 0.200 | -2.000 | 1/2 |" in md
    picks = json.loads((tmp_path / "pooling.json").read_text())["pooler_lr"]
    assert picks["supervised/layer_att_cls"]["picked"] == 1e-3


def test_tuning_scores_are_listed_in_learning_rate_order_whichever_is_picked(tiny_bert, tiny_data, tmp_path):
    grid = _grid(tiny_bert, tiny_data, tmp_path, poolers=["layer_att_res"], objectives=["supervised"], seeds=1,
                 pooler_lrs=[1e-4, 1e-3, 1e-2])
    for spec, dev in zip([s for s in grid.plan() if "tune" in s.roles], (80.0, 82.0, 84.0)):
        _fake_eval(spec.run_dir(tmp_path), dev)
    grid.report()
    md = (tmp_path / "pooling.md").read_text(encoding="utf-8")
    assert "supervised/layer_att_res: 0.01 (dev by lr: 0.0001: 80.00, 0.001: 82.00, 0.01: 84.00)" in md
    assert "`--set`: train.batch_size=4." in md and "Config-file settings" not in md  # no file given


def test_runner_skips_finished_records_failures_and_goes_on(tiny_bert, tiny_data, tmp_path):
    grid = _grid(tiny_bert, tiny_data, tmp_path, poolers=["avg_last", "cls_last"], objectives=["supervised"], seeds=2)
    calls = []

    def train(spec, run_dir, resume):
        calls.append(spec.key)
        if spec.meta["pooler"] == "cls_last" and spec.seed == 1:
            raise RuntimeError("out of memory")
        _fake_eval(run_dir, 70.0 + spec.seed)

    grid.train, grid.post = train, lambda spec, run_dir: None
    outcome = run_grid(grid, log=lambda *_: None)
    assert len(calls) == 4 and len(outcome.trained) == 3 and len(outcome.failed) == 1
    failure = json.loads((tmp_path / FAILURES).read_text().splitlines()[0])
    assert "cls_last-seed1" in failure["key"] and "out of memory" in failure["error"]
    assert summarize(outcome, tmp_path, [], log=lambda *_: None) == 1
    grid.report()
    md = (tmp_path / "pooling.md").read_text()
    assert "| supervised | cls_last | full | - | 70.00 | 65.00 | 0.200 | -2.000 | 1/2 |" in md
    assert "| supervised | avg_last | full | - | 70.50 ± 0.71 |" in md
    assert "| 1/2 | +0.00 (p n/a, 1 seed) |" in md and md.count("| ref. |") == 1  # paired with avg_last's seed 0
    calls.clear()
    outcome = run_grid(grid, log=lambda *_: None)  # the rerun only retries the failed run
    assert len(calls) == 1 and "cls_last-seed1" in calls[0] and len(outcome.skipped) == 3


def test_time_limit_starts_no_run_whose_estimate_does_not_fit(tiny_bert, tiny_data, tmp_path):
    grid = _grid(tiny_bert, tiny_data, tmp_path, poolers=["avg_last", "cls_last"], objectives=["supervised"],
                 seeds=1)
    calls = []

    def train(spec, run_dir, resume):  # the first run measures 200 s a step: the second cannot fit in 60 s
        calls.append(spec.key)
        _fake_eval(run_dir, 70.0)
        record = json.loads((run_dir / "eval.json").read_text())
        (run_dir / "eval.json").write_text(json.dumps({**record, "train_seconds": 2000.0}))

    grid.train, grid.post = train, lambda spec, run_dir: None
    outcome = run_grid(grid, log=lambda *_: None, time_limit=60.0)
    assert len(calls) == 1 and outcome.trained == calls and len(outcome.blocked) == 1
    assert outcome.out_of_time.startswith(outcome.blocked[0]) and "of the limit is left" in outcome.out_of_time
    lines = []
    assert summarize(outcome, tmp_path, [], log=lines.append) == 0  # a clean stop, not a failure
    assert "stopped by --time-limit" in lines[-1] and "1 run(s) left" in lines[-1]
    outcome = run_grid(grid, log=lambda *_: None, time_limit=1e6)  # a rerun with time goes on
    assert len(calls) == 2 and not outcome.out_of_time and not outcome.blocked


def test_time_limit_passes_over_a_run_that_does_not_fit_and_starts_a_later_one(tiny_bert, tiny_data, tmp_path,
                                                                                monkeypatch):
    import layerwise.reproduce.runner as runner
    grid = _grid(tiny_bert, tiny_data, tmp_path, poolers=["avg_last", "cls_last"], objectives=["supervised"],
                 seeds=1)
    long_run, short_run = grid.plan()
    assert "avg_last" in long_run.key and "cls_last" in short_run.key
    leftover = long_run.run_dir(tmp_path)
    leftover.mkdir(parents=True)
    (leftover / "metrics.jsonl").write_text("{}\n")  # a run that stopped before its first checkpoint
    monkeypatch.setattr(runner, "run_estimate",
                        lambda grid, spec, state, rates: ("", 1e6 if spec.key == long_run.key else 1.0, ""))
    calls = []

    def train(spec, run_dir, resume):
        calls.append(spec.key)
        _fake_eval(run_dir, 70.0)

    grid.train, grid.post = train, lambda spec, run_dir: None
    outcome = run_grid(grid, log=lambda *_: None, time_limit=60.0)
    assert calls == [short_run.key] and outcome.blocked == [long_run.key]
    assert outcome.out_of_time.startswith(long_run.key)
    assert (leftover / "metrics.jsonl").is_file()  # a run that does not start keeps its directory


@pytest.mark.parametrize("text, seconds", [("45m", 2700), ("2h", 7200), ("1h30m", 5400), ("90s", 90),
                                           ("1.5h", 5400), (" 10M ", 600)])
def test_durations_parse_with_their_units(text, seconds):
    from layerwise.commands.reproduce import parse_duration

    assert parse_duration(text) == seconds


@pytest.mark.parametrize("value, needle", [("90", "with units"), ("1x", "with units"), ("0m", "above zero"),
                                           ("", "with units")])
def test_bad_time_limits_are_one_line_errors(tiny_bert, tiny_data, tmp_path, capsys, value, needle):
    code = main(["reproduce", "pooling", "--model", str(tiny_bert), "--data-dir", str(tiny_data), "--output-dir",
                 str(tmp_path), "--poolers", "avg_last", "--time-limit", value])
    err = capsys.readouterr().err
    assert code == 2 and f"--time-limit {value}:" in err and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_dry_run_lists_runs_with_an_estimate(tiny_bert, tiny_data, tmp_path, capsys):
    args = ["reproduce", "pooling", "--model", str(tiny_bert), "--data-dir", str(tiny_data), "--output-dir",
            str(tmp_path), "--seeds", "2", "--poolers", "avg_last,layer_att_cls", "--dry-run"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "embed-sup-avg_last-seed0-" in out and "embed-sup-layer_att_cls-plr1e-03-seed0-" in out
    assert "embed-hybrid-layer_att_cls-seed1-?" in out and "waiting: pooler lr" in out
    assert "ESTIMATED time left" in out and "constant" in out and "18 runs" in out
    assert not (tmp_path / "runs").exists()  # nothing trained
    grid = _grid(tiny_bert, tiny_data, tmp_path, poolers=["avg_last"], objectives=["supervised"])
    _fake_eval(grid.plan()[0].run_dir(tmp_path), 70.0)
    rows = dry_run(grid, log=lambda *_: None)
    assert rows[0]["state"] == "finished" and {r["source"] for r in rows[1:]} == {"measured"}


def test_estimate_uses_the_rate_measured_on_the_same_task(tmp_path):
    from layerwise.reproduce.plan import estimate_seconds, measured_rates, results_path
    from layerwise.training.finetune import FinetuneConfig

    def spec(task: str, seed: int) -> RunSpec:
        return RunSpec("finetune", task, seed, FinetuneConfig(task=task), group=task)

    def finish(run: RunSpec, steps: int, seconds: float) -> None:
        path = results_path(run, tmp_path)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"steps": steps, "train_seconds": seconds}), encoding="utf-8")

    cola, rte, mrpc = spec("cola", 0), spec("rte", 0), spec("mrpc", 0)
    finish(cola, 100, 100.0)  # 1 s per step
    finish(rte, 100, 500.0)  # 5 s per step: longer sentences
    rates = measured_rates([cola, rte, mrpc], tmp_path, sentences=lambda cfg: 1)
    batch = FinetuneConfig().train.batch_size

    def estimate(task: str) -> tuple[float | None, str]:
        return estimate_seconds("finetune", FinetuneConfig(task=task), 10, rates, sentences=lambda cfg: 1)

    assert estimate("rte") == (pytest.approx(50.0), "measured")
    assert estimate("cola") == (pytest.approx(10.0), "measured")
    assert estimate("mrpc") == (pytest.approx(30.0), "measured")  # no MRPC run yet: the model's rate on all tasks
    assert rates[("finetune", "all-MiniLM-L6-v2", "cpu", "rte")] == pytest.approx(5.0 / batch)


def test_estimate_measures_finished_runs_of_another_grid_in_the_output_directory(tmp_path):
    from layerwise.config import save_config
    from layerwise.reproduce.plan import estimate_seconds, measured_rates, results_path
    from layerwise.training.finetune import FinetuneConfig

    rte = RunSpec("finetune", "rte", 0, FinetuneConfig(task="rte"), group="rte")  # finished by an RTE-only grid
    path = results_path(rte, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"steps": 100, "train_seconds": 500.0}), encoding="utf-8")
    save_config(rte.config, path.parent / "config.yaml")
    broken = tmp_path / "runs" / "finetune-cola-none-seed0-0123456789ab"  # unreadable config: skipped
    broken.mkdir()
    (broken / "results.json").write_text(json.dumps({"steps": 1, "train_seconds": 1e6}), encoding="utf-8")
    (broken / "config.yaml").write_text("train: {batch_size: 0}\n", encoding="utf-8")
    mrpc = RunSpec("finetune", "mrpc", 0, FinetuneConfig(task="mrpc"), group="mrpc")
    rates = measured_rates([mrpc], tmp_path, sentences=lambda cfg: 1)
    assert estimate_seconds("finetune", mrpc.config, 10, rates, sentences=lambda cfg: 1) == (
        pytest.approx(50.0), "measured")
    assert measured_rates([RunSpec("embed", "x", 0, None, group="x")], tmp_path, sentences=lambda cfg: 1) == {}


def test_a_rate_from_another_task_is_scaled_by_its_characters_per_sentence(tmp_path):
    from layerwise.reproduce.plan import estimate_seconds, measured_rates, results_path
    from layerwise.training.finetune import FinetuneConfig

    cola, rte = (RunSpec("finetune", task, 0, FinetuneConfig(task=task), group=task) for task in ("cola", "rte"))
    path = results_path(cola, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"steps": 100, "train_seconds": 100.0}), encoding="utf-8")  # 1 s per step
    length = {"cola": 10.0, "rte": 50.0}.get
    rates = measured_rates([cola, rte], tmp_path, lambda cfg: 1, lambda cfg: length(cfg.task))
    for task, seconds in (("cola", 10.0), ("rte", 50.0)):  # RTE's sentences are 5 times as long
        assert estimate_seconds("finetune", FinetuneConfig(task=task), 10, rates, lambda cfg: 1,
                                lambda cfg: length(cfg.task)) == (pytest.approx(seconds), "measured")
    assert measured_rates([cola], tmp_path, lambda cfg: 1, lambda cfg: None) == {}  # its data is not here


def test_grid_characters_are_the_padded_batch_width_capped_where_truncation_cuts(tiny_bert, tmp_path):
    from test_finetune import sentence, write_cola

    from layerwise.reproduce.attendout import AttendoutGrid, AttendoutOptions
    from layerwise.reproduce.plan import padded_characters

    assert padded_characters(["a" * 1000, "bb"], cap=8, batch_size=2) == 8.0  # one batch, as wide as its longest
    assert padded_characters(["a" * 1000, "bb"], cap=8, batch_size=1) == 5.0  # unpadded: the capped mean
    assert padded_characters(["aaaa", "b", "c", "d"], cap=8, batch_size=2) == 2.5  # widths 4 and 1, whatever order
    assert padded_characters([], cap=8, batch_size=2) == 1.0
    data = write_cola(tmp_path / "data", train=20, dev=8)
    grid = AttendoutGrid(AttendoutOptions(model=str(tiny_bert), data_dir=str(data), output_dir=str(tmp_path / "o"),
                                          seeds=1, tasks=["cola"]), log=lambda *_: None)
    cfg = grid.plan()[0].config
    lengths = [len(sentence(i)) for i in range(20)]
    assert grid.examples(cfg) == 20 and cfg.train.batch_size >= 20
    assert grid.characters(cfg) == max(lengths)  # all 20 in one batch
    cfg.train.batch_size = 1
    assert grid.characters(cfg) == pytest.approx(sum(lengths) / 20)
    cfg.max_length = 2  # truncated at 2 tokens: each sentence counted up to 4 x 2 characters
    assert grid.characters(cfg) == 8.0
    cfg.subset = 1
    assert grid.examples(cfg) == 1


def test_attendout_dry_run_orders_scheduled_after_attendout(tiny_bert, tmp_path, capsys):
    from test_finetune import write_cola

    data = write_cola(tmp_path / "data", train=20, dev=8)
    assert main(["reproduce", "attendout", "--model", str(tiny_bert), "--data-dir", str(data), "--output-dir",
                 str(tmp_path / "out"), "--seeds", "1", "--tasks", "cola", "--dry-run"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "finetune-" in line]
    names = [line.split()[1].rsplit("-", 2)[0] for line in lines]
    assert names[:3] == ["finetune-cola-standard", "finetune-cola-attendout", "finetune-cola-scheduled_bernoulli"]
    assert len(names) == 6
    attendout_key = lines[1].split()[1]
    assert f"waiting: {attendout_key}" in lines[2]


def test_attendout_shards_balance_runs_and_keep_a_pattern_with_its_user(tiny_bert, tmp_path, capsys):
    """One task, three seeds, two shards: 9 runs each (not 12 and 6 as with one group per seed), and every
    scheduled_bernoulli run sits in the shard of the attendout run whose pattern it reads."""
    from test_finetune import write_cola

    data = write_cola(tmp_path / "data", train=20, dev=8)
    shards = []
    for k in range(2):
        assert main(["reproduce", "attendout", "--model", str(tiny_bert), "--data-dir", str(data), "--output-dir",
                     str(tmp_path / "out"), "--seeds", "3", "--tasks", "cola", "--dry-run", "--shard", f"{k}/2"]) == 0
        shards.append([line.split()[1] for line in capsys.readouterr().out.splitlines() if "finetune-" in line])
    assert [len(names) for names in shards] == [9, 9]
    assert not set(shards[0]) & set(shards[1])
    for names in shards:
        for seed in range(3):
            has = {n.rsplit("-", 2)[0].split("-", 2)[2] for n in names if n.rsplit("-", 2)[1] == f"seed{seed}"}
            assert ("attendout" in has) == ("scheduled_bernoulli" in has)


def _attendout_dry_run(tiny_bert, tmp_path, capsys, config_text: str, *extra: str) -> tuple[int, str, str]:
    from test_finetune import write_cola

    data = write_cola(tmp_path / "data", train=20, dev=8)
    config = tmp_path / "grid.yaml"
    config.write_text(config_text, encoding="utf-8")
    code = main(["reproduce", "attendout", "--config", str(config), "--model", str(tiny_bert), "--data-dir",
                 str(data), "--output-dir", str(tmp_path / "out"), "--seeds", "1", "--tasks", "cola", "--dry-run",
                 *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_attendout_variants_are_named_strategies_with_their_own_keys(tiny_bert, tmp_path, capsys):
    variants = ("variants:\n  coop: {dropout: attendout, drop: {objective: cooperative}}\n"
                "  slow: {dropout: attendout, drop: {gnet_lr: 1.0e-4}}\n")
    code, out, _ = _attendout_dry_run(tiny_bert, tmp_path, capsys, variants, "--strategies",
                                      "standard,attendout,coop,slow")
    keys = [line.split()[1] for line in out.splitlines() if "finetune-" in line]
    assert code == 0 and [k.rsplit("-", 2)[0] for k in keys] == [
        "finetune-cola-standard", "finetune-cola-attendout", "finetune-cola-coop", "finetune-cola-slow"]
    assert len({k.rsplit("-", 1)[1] for k in keys}) == 4  # each variant is its own run
    code, out, _ = _attendout_dry_run(tiny_bert, tmp_path, capsys, "variants:\n  sb: {dropout: scheduled_bernoulli}\n",
                                      "--strategies", "sb")
    lines = [line for line in out.splitlines() if "finetune-" in line]
    assert code == 0 and "finetune-cola-attendout-" in lines[0] and "finetune-cola-sb-" in lines[1]
    assert f"waiting: {lines[0].split()[1]}" in lines[1]  # a scheduled_bernoulli variant follows attendout too
    code, plain, _ = _attendout_dry_run(tiny_bert, tmp_path, capsys, "seeds: 1\n", "--strategies",
                                        "standard,attendout")
    assert code == 0 and [line.split()[1] for line in plain.splitlines() if "finetune-" in line] == keys[:2]


@pytest.mark.parametrize("config_text, needle", [
    ("variants:\n  coop: {drop: {objective: cooperative}}\n", "variants.coop: expected a 'dropout:' key"),
    ("variants:\n  standard: {dropout: attendout}\n", "variants.standard: the name of a built-in strategy"),
    ("variants:\n  coop: {dropout: attendot}\n", "variants.coop.dropout: unknown dropout strategy 'attendot'"),
    ("strategies: [standard, coop]\n", "coop"),
])
def test_bad_variants_are_one_line_errors(tiny_bert, tmp_path, capsys, config_text, needle):
    code, _, err = _attendout_dry_run(tiny_bert, tmp_path, capsys, config_text)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, needle", [
    (["pooling", "--poolers", "avg_lst"], "did you mean 'avg_last'"),
    (["pooling", "--pooler-lrs", "0"], "--pooler-lrs"),
    (["attendout", "--tasks", "colaa"], "unknown task"),
    (["pooling", "--set", "train.lrr=1"], "unknown key 'train.lrr'"),
    (["pooling", "--shard", "3/2"], "--shard"),
    (["pooling", "--time-limit", "5m"], "--time-limit 5m limits training, and --dry-run trains nothing"),
])
def test_bad_options_are_one_line_errors(tiny_bert, tiny_data, tmp_path, capsys, args, needle):
    code = main(["reproduce", args[0], "--model", str(tiny_bert), "--data-dir", str(tiny_data), "--output-dir",
                 str(tmp_path), "--dry-run", *args[1:]])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name, runs", [("pooling-bert-base", 58), ("pooling-roberta-large", 58),
                                        ("attendout-bert-base", 30), ("attendout-roberta-large", 30),
                                        ("attendout-cola-sweep", 10), ("attendout-sst2-cpu", 30)])
def test_paper_configs_resolve(name, runs, tiny_bert, tiny_data, tmp_path, capsys):
    from test_finetune import write_cola

    write_cola(tiny_data, train=20, dev=8)
    experiment = name.split("-")[0]
    extra = ["--tasks", "cola"] if experiment == "attendout" else []
    assert main(["reproduce", experiment, "--config", str(REPO / "configs" / f"{name}.yaml"), "--model",
                 str(tiny_bert), "--data-dir", str(tiny_data), "--device", "cpu", "--output-dir", str(tmp_path),
                 "--dry-run", *extra]) == 0
    out = capsys.readouterr().out
    assert f"{runs} runs" in out


def test_config_file_data_paths_keep_keys_when_the_data_moves(tiny_bert, tiny_data, tmp_path, capsys):
    import shutil

    def keys(data: Path) -> list[str]:
        assert main(["reproduce", "pooling", "--config", str(REPO / "configs" / "pooling-bert-base.yaml"),
                     "--model", str(tiny_bert), "--data-dir", str(data), "--device", "cpu", "--output-dir",
                     str(tmp_path / "out"), "--poolers", "avg_last", "--seeds", "1", "--dry-run"]) == 0
        return [line.split()[1] for line in capsys.readouterr().out.splitlines() if "embed-" in line]

    moved = shutil.copytree(tiny_data, tmp_path / "moved")  # the config's "{data_dir}/nli_for_simcse.csv" moves
    first = keys(tiny_data)
    assert len(first) == 3 and keys(moved) == first  # supervised, unsupervised, hybrid


def test_paper_config_tiny_run_on_cpu_and_cuda_refused_without_gpu(tiny_bert, tiny_data, tmp_path, capsys):
    base = ["reproduce", "pooling", "--config", str(REPO / "configs" / "pooling-bert-base.yaml"), "--model",
            str(tiny_bert), "--data-dir", str(tiny_data), "--output-dir", str(tmp_path), "--poolers", "avg_last",
            "--objectives", "supervised", "--seeds", "1", "--max-steps", "1", "--eval-subset", "12"]
    import torch

    if not torch.cuda.is_available():
        assert main(base) == 2 and "CUDA is not available" in capsys.readouterr().err  # the config says cuda
    assert main(base + ["--device", "cpu", "--set", "train.batch_size=2"]) == 0
    run = next((tmp_path / "runs").glob("embed-sup-avg_last-seed0-*"))
    config = json.loads(json.dumps(__import__("yaml").safe_load((run / "config.yaml").read_text())))
    assert config["model"] == str(tiny_bert) and config["train_file"] == f"{tiny_data}/nli_for_simcse.csv"
    assert config["hard_negative_weight"] == 1.0 and config["train"]["lr"] == 2e-5
    assert "| supervised | avg_last | full |" in (tmp_path / "pooling.md").read_text()


def test_paired_comparison_with_avg_last_per_objective():
    from layerwise.reproduce.pooling import add_paired_reference, fmt_paired

    rows = [{"objective": "supervised", "pooler": "avg_last", "mode": "full",
             "stsb_test_by_seed": {0: 80, 1: 81, 2: 79}},
            {"objective": "supervised", "pooler": "layer_att_res", "mode": "full",
             "stsb_test_by_seed": {0: 81, 1: 82.5, 2: 79.5}},
            {"objective": "supervised", "pooler": "layer_att_res", "mode": "static", "stsb_test_by_seed": {}},
            {"objective": "hybrid", "pooler": "layer_att_cls", "mode": "full", "stsb_test_by_seed": {0: 70}}]
    add_paired_reference(rows)
    assert rows[0]["vs_reference"] == "reference" and fmt_paired(rows[0]["vs_reference"]) == "ref."
    res = rows[1]["vs_reference"]
    assert res["n"] == 3 and abs(res["mean_diff"] - 1.0) < 1e-12  # differences 1, 1.5, 0.5
    from scipy import stats

    p = stats.ttest_rel([81, 82.5, 79.5], [80, 81, 79]).pvalue
    assert fmt_paired(res) == f"+1.00 (p {fmt_p(p)}, 3 seeds)"
    assert fmt_paired(rows[2]["vs_reference"]) == "-"  # no finished seed
    assert "vs_reference" not in rows[3]  # no avg_last trained with the hybrid objective


def test_failed_post_of_a_finished_run_is_recorded_and_the_grid_goes_on(tiny_bert, tiny_data, tmp_path):
    grid = _grid(tiny_bert, tiny_data, tmp_path, poolers=["avg_last"], objectives=["supervised"], seeds=2)
    _fake_eval(grid.plan()[0].run_dir(tmp_path), 70.0)  # seed 0 finished by an older version, post missing
    trained = []

    def post(spec, run_dir):
        if spec.seed == 0:
            raise OSError("disk full")

    grid.needs_post = lambda spec, run_dir: spec.seed == 0
    grid.train, grid.post = lambda spec, run_dir, resume: (trained.append(spec.key), _fake_eval(run_dir, 71.0)), post
    outcome = run_grid(grid, log=lambda *_: None)
    failure = json.loads((tmp_path / FAILURES).read_text().splitlines()[0])
    assert "avg_last-seed0" in failure["key"] and failure["error"] == "OSError: disk full"
    assert outcome.failed == [failure["key"]] and len(trained) == 1 and len(outcome.skipped) == 1
    assert "avg_last-seed1" in trained[0] and "avg_last-seed1" in outcome.trained[0]


def test_finished_run_completed_by_post_is_handed_to_on_finished_after_its_post(tiny_bert, tiny_data, tmp_path):
    grid = _grid(tiny_bert, tiny_data, tmp_path, poolers=["avg_last"], objectives=["supervised"], seeds=3)
    for spec in grid.plan()[:2]:  # seeds 0 and 1 finished by an older version, their post missing
        _fake_eval(spec.run_dir(tmp_path), 70.0)

    def post(spec, run_dir):
        if spec.seed == 1:
            raise OSError("disk full")
        (run_dir / "post.json").write_text("{}")

    handed: list[tuple[int, bool]] = []  # (seed, post output there when handed over)
    grid.needs_post = lambda spec, run_dir: not (run_dir / "post.json").is_file()
    grid.train, grid.post = lambda spec, run_dir, resume: _fake_eval(run_dir, 71.0), post
    run_grid(grid, log=lambda *_: None,
             on_finished=lambda spec, run_dir: handed.append((spec.seed, (run_dir / "post.json").is_file())))
    assert handed == [(0, True), (2, True)]  # seed 1's post failed: not handed over


def test_pooling_figure_points_keep_full_and_static_rows_with_their_mean_and_std():
    from layerwise.reproduce.pooling import plot_points

    def row(objective, pooler, mode, dev=None, test=None):
        metrics = {name: stat for name, stat in (("STS-B dev", dev), ("STS-B test", test)) if stat is not None}
        return {"objective": objective, "pooler": pooler, "mode": mode, "metrics": metrics}

    rows = [row("untrained", "avg_last", "full", test={"mean": 82.0, "std": None}),
            row("supervised", "layer_att", "full", dev={"mean": 85.9, "std": 0.2}, test={"mean": 81.3, "std": 0.4}),
            row("supervised", "layer_att", "static", test={"mean": 82.2, "std": 0.0}),
            row("supervised", "layer_att", "cls_last", test={"mean": 73.7, "std": 0.2}),
            row("hybrid", "layer_att_cls", "full", test={"mean": None, "std": None})]
    assert plot_points(rows) == [
        ("untrained avg_last", "untrained", {"STS-B test": (82.0, None)}),
        ("supervised layer_att", "supervised", {"STS-B dev": (85.9, 0.2), "STS-B test": (81.3, 0.4)}),
        ("supervised layer_att (static)", "supervised", {"STS-B test": (82.2, 0.0)})]
