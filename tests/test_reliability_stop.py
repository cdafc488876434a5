"""Graceful stops: SIGTERM, a first Ctrl-C or --time-limit save a checkpoint at the next step and exit with a
one-line message; --resume then finishes the same run an uninterrupted one would have."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from test_reliability_helpers import after_optimizer_step, error_lines, run_cli, write_data
from test_reliability_resume import assert_same_run

STEPS = 20
STOP_AT = 9  # mid-epoch: an epoch is 7 batches


def embed_args(data: Path, model: Path, out: Path, *extra: str) -> list[str]:
    """20 steps of batch 4 over 28 triplets, evaluated and checkpointed every 5 steps."""
    return ["train-embed", "--data-dir", str(data), "--model", str(model), "--output-dir", str(out),
            "--max-steps", str(STEPS), "--batch-size", "4", "--eval-every", "5", "--log-every", "1",
            "--set", "train.progress=false", "--static-sentences", "8", *extra]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_data(tmp_path_factory.mktemp("data"))


def signal_at_step(monkeypatch, signum: int, step: int) -> None:
    """Send this process `signum` right after optimizer step `step`, as a scheduler or a user would."""
    from layerwise.training.loop import Trainer

    monkeypatch.setattr(Trainer, "_optimizer_step", after_optimizer_step(step, lambda _: os.kill(os.getpid(), signum)))


def test_sigterm_saves_a_checkpoint_stops_and_resume_matches_an_uninterrupted_run(
        tmp_path: Path, data: Path, tiny_bert: Path, capsys, monkeypatch):
    reference = tmp_path / "reference"
    assert run_cli(embed_args(data, tiny_bert, reference), capsys)[0] == 0

    out, before = tmp_path / "run", signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as patch:
        signal_at_step(patch, signal.SIGTERM, STOP_AT)
        code, _, err = run_cli(embed_args(data, tiny_bert, out), capsys)
    assert code == 128 + signal.SIGTERM, err
    lines = [line for line in err.splitlines() if line.startswith("layerwise train-embed:")]
    assert lines == [f"layerwise train-embed: stopped at step {STOP_AT} of {STEPS} (SIGTERM); checkpoint saved in "
                     f"{out / 'checkpoints' / f'step-{STOP_AT}'}; rerun the same command with --resume to go on"]
    assert "Traceback" not in err
    assert (out / "checkpoints" / f"step-{STOP_AT}" / "trainer_state.json").is_file()
    assert not (out / "eval.json").exists() and not (out / "final").exists()
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is gone with the run

    code, _, err = run_cli(embed_args(data, tiny_bert, out, "--resume"), capsys)
    assert code == 0, err
    assert_same_run(out, reference)


def test_a_first_ctrl_c_stops_gracefully(tmp_path: Path, data: Path, tiny_bert: Path, capsys, monkeypatch):
    out, before = tmp_path / "run", signal.getsignal(signal.SIGINT)
    signal_at_step(monkeypatch, signal.SIGINT, 3)
    code, _, err = run_cli(embed_args(data, tiny_bert, out), capsys)
    assert code == 130 and "stopped at step 3 of 20 (Ctrl-C)" in err, err
    assert (out / "checkpoints" / "step-3").is_dir()
    assert signal.getsignal(signal.SIGINT) is before


def test_time_limit_stops_finetune_with_a_checkpoint_and_resume_finishes(tiny_bert: Path, tmp_path: Path, capsys):
    from test_finetune import write_cola

    data, out = write_cola(tmp_path / "data", train=24, dev=10), tmp_path / "run"
    args = ["finetune", "--task", "cola", "--model", str(tiny_bert), "--data-dir", str(data), "--output-dir",
            str(out), "--max-steps", "4", "--batch-size", "8", "--device", "cpu", "--set", "train.progress=false"]
    code, _, err = run_cli([*args, "--time-limit", "0.001s"], capsys)  # up before the first step ends
    assert code == 4 and "stopped at step 1 of 4 (--time-limit 0.001s)" in err, err
    assert (out / "checkpoints" / "step-1").is_dir() and not (out / "results.json").exists()
    code, _, err = run_cli([*args, "--resume", "--time-limit", "1h"], capsys)
    assert code == 0, err
    assert (out / "results.json").is_file()


@pytest.mark.parametrize("value", ["5", "0m", "soon"])
def test_bad_training_time_limits_are_one_line_errors(tiny_bert: Path, tmp_path: Path, capsys, value: str):
    code, _, err = run_cli(["finetune", "--task", "cola", "--model", str(tiny_bert), "--data-dir", str(tmp_path),
                            "--output-dir", str(tmp_path / "run"), "--time-limit", value], capsys)
    assert code == 2 and len(error_lines(err)) == 1 and f"--time-limit {value}: expected a duration" in err, err
    assert not (tmp_path / "run").exists()


def test_a_second_ctrl_c_interrupts_at_once():
    from layerwise.training.stopping import StopRequest

    before = signal.getsignal(signal.SIGINT)
    with StopRequest() as stop:
        assert stop.reason() == ""
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.reason() == "Ctrl-C" and stop.exit_code() == 130
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_time_limit_context_sets_and_restores_the_deadline():
    from layerwise.training.stopping import StopRequest, time_limit

    stop = StopRequest()
    with time_limit(1e-9, "--time-limit 1s"):
        assert stop.reason() == "--time-limit 1s" and stop.exit_code() == 4
        with time_limit(None):  # no limit of its own: the outer one still holds
            assert stop.reason() == "--time-limit 1s"
    assert stop.reason() == ""
