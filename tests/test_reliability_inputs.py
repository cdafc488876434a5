"""Issue 8, part 1: a table of bad (and awkward but valid) inputs across every command.

Each bad input must give exit code 2, exactly one line `layerwise CMD: error: ...` naming the file, line or option
and what was expected, no traceback, and nothing half-written at the output path. The awkward-but-valid inputs
(UTF-8 BOM, CRLF endings, blank lines, over-long texts) must be accepted. docs/reliability.md lists the table.
"""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from test_reliability_helpers import (
    REPO, TRAIN_FAST, as_bom_crlf, edit_lines, error_lines, python_cli, run_cli, stsb_lines, write_data,
)


@dataclass
class Ctx:
    tmp: Path
    data: Path
    model: Path
    out: Path

    def fmt(self, argv: list[str]) -> list[str]:
        return [a.format(tmp=self.tmp, data=self.data, model=self.model, out=self.out) for a in argv]


@dataclass
class Case:
    id: str
    argv: list[str]
    expect: list[str]  # substrings of the one error line (file, line, option, what was expected)
    setup: Callable[[Ctx], None] | None = None
    out: str = "run"  # output path (relative to tmp) that must not be left behind
    left: str = "absent"  # absent: the output path must not exist afterwards; untouched: a pre-existing run unchanged
    marks: list = field(default_factory=list)


TE = ["train-embed", "--data-dir", "{data}", "--model", "{model}", "--output-dir", "{out}", *TRAIN_FAST]
ENC = ["encode", "--model", "{model}", "--input", "{data}/sentences.txt", "--output", "{out}"]
STS = ["evaluate", "sts", "--model", "{model}", "--data-dir", "{data}", "--output", "{out}"]
RET = ["evaluate", "retrieval", "--model", "{model}", "--output", "{out}"]
SPACE = ["evaluate", "space", "--model", "{model}", "--data-dir", "{data}", "--sentences", "8", "--output", "{out}"]
FT = ["finetune", "--task", "sst2", "--data-dir", "{data}", "--model", "{model}", "--output-dir", "{out}",
      "--max-steps", "2", "--batch-size", "4", "--set", "train.progress=false"]

SNLI = "senteval/SNLI"
STSB = "stsbenchmark"
SST = "glue/SST-2"


def rm(rel: str) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        path = ctx.data / rel
        if path.is_dir():
            import shutil

            shutil.rmtree(path)
        else:
            path.unlink()
    return setup


def write(rel: str, content: str | bytes) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        path = (ctx.data / rel[5:]) if rel.startswith("data/") else ctx.tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return setup


def line(rel: str, number: int, text: str | None) -> Callable[[Ctx], None]:
    return lambda ctx: edit_lines(ctx.data / rel, number, text)


def bad_bytes(rel: str, number: int) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        path = ctx.data / rel
        lines = path.read_bytes().split(b"\n")
        lines[number - 1] = lines[number - 1] + b" caf\xe9"  # Latin-1, not UTF-8
        path.write_bytes(b"\n".join(lines))
    return setup


def model_without_weights(ctx: Ctx) -> None:
    import shutil

    shutil.copytree(ctx.model, ctx.tmp / "noweights")
    (ctx.tmp / "noweights" / "model.safetensors").unlink()


def finished_run(results_file: str) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        ctx.out.mkdir()
        (ctx.out / "config.yaml").write_text("model: x\n", encoding="utf-8")
        (ctx.out / results_file).write_text('{"finished": true}\n', encoding="utf-8")
    return setup


def both(*setups: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        for s in setups:
            s(ctx)
    return setup


def long_text(words: int = 400) -> str:
    return " ".join(["man plays guitar in the park"] * (words // 6))


CASES = [
    # ------------------------------------------------------------------------------------------- train-embed
    Case("te-no-snli-folder", TE, ["senteval/SNLI", "SNLI folder not found", "--data-dir"], rm(SNLI)),
    Case("te-missing-file", TE, ["s1.dev", "file not found"], rm(f"{SNLI}/s1.dev")),
    Case("te-empty-file", TE, ["labels.dev", "file is empty"], write(f"data/{SNLI}/labels.dev", "\n\n")),
    Case("te-non-utf8", TE, ["s2.dev:3", "not valid UTF-8", "0xe9"], bad_bytes(f"{SNLI}/s2.dev", 3)),
    Case("te-line-counts-differ", TE, ["labels.dev", "line counts differ", "s1 42", "labels 41"],
         line(f"{SNLI}/labels.dev", 5, None)),
    Case("te-bad-label", TE, ["labels.dev:2", "expected entailment, neutral or contradiction", "'entails'"],
         line(f"{SNLI}/labels.dev", 2, "entails")),
    Case("te-blank-line-misaligns", TE, ["s1.dev:4", "empty line", "line-aligned"], line(f"{SNLI}/s1.dev", 4, "")),
    Case("te-stsb-dev-missing", TE, ["STS-B file not found", "sts-dev.csv"], rm(f"{STSB}/sts-dev.csv")),
    Case("te-stsb-test-missing", TE, ["STS-B file not found", "sts-test.csv"], rm(f"{STSB}/sts-test.csv")),
    Case("te-stsb-wrong-delimiter", TE, ["sts-dev.csv:1", "expected at least 7 tab-separated fields", "got 1"],
         write(f"data/{STSB}/sts-dev.csv", "\n".join(row.replace("\t", ",") for row in stsb_lines()) + "\n")),
    Case("te-stsb-nan-score", TE, ["sts-dev.csv:3", "expected a finite score", "'nan'"],
         line(f"{STSB}/sts-dev.csv", 3, "main-news\tf\t2012\t0003\tnan\ta man\ta dog")),
    Case("te-stsb-text-score", TE, ["sts-dev.csv:2", "expected a numeric score", "'high'"],
         line(f"{STSB}/sts-dev.csv", 2, "main-news\tf\t2012\t0002\thigh\ta man\ta dog")),
    Case("te-train-file-header", TE + ["--train-file", "{tmp}/nli.csv"], ["nli.csv:1", "header lacks column(s) sent0"],
         write("nli.csv", "a,b,c\nx,y,z\n")),
    Case("te-train-file-columns", TE + ["--train-file", "{tmp}/nli.tsv"], ["nli.tsv:3", "expected 3 fields, found 2"],
         write("nli.tsv", "anchor\tpositive\tnegative\na\tb\tc\na\tb\n")),
    Case("te-train-file-format", TE + ["--train-file", "{tmp}/nli.xlsx"], ["nli.xlsx", "unknown format '.xlsx'"],
         write("nli.xlsx", "x")),
    Case("te-unknown-pooler", TE + ["--pooler", "layer_att_rse"],
         ["unknown pooler 'layer_att_rse'", "did you mean 'layer_att_res'"]),
    Case("te-unknown-objective", TE + ["--objective", "supervise"],
         ["unknown objective 'supervise'", "did you mean 'supervised'"]),
    Case("te-bad-choice", TE + ["--pooler-scale", "sqrt"], ["--pooler-scale", "invalid choice: 'sqrt'"]),
    Case("te-on-nan-typo", TE + ["--set", "train.on_nan=skp"], ["--set: train.on_nan", "did you mean 'skip'"]),
    Case("te-model-missing", TE[:4] + ["{tmp}/nope"] + TE[5:], ["--model", "nope", "no such directory"]),
    Case("te-model-without-weights", TE[:4] + ["{tmp}/noweights"] + TE[5:],
         ["--model", "noweights", "no weights", "model.safetensors"], model_without_weights),
    Case("te-config-typo-key", TE + ["--config", "{tmp}/cfg.yaml"],
         ["cfg.yaml: unknown key 'train.bach_size'", "did you mean 'train.batch_size'"],
         write("cfg.yaml", "pooler: avg_last\ntrain:\n  bach_size: 4\n")),
    Case("te-config-missing", TE + ["--config", "{tmp}/none.yaml"], ["--config", "none.yaml", "file not found"]),
    Case("te-config-bad-yaml", TE + ["--config", "{tmp}/cfg.yaml"], ["cfg.yaml:3", "not valid YAML/JSON"],
         write("cfg.yaml", "train:\n  lr: [1, 2\n")),
    Case("te-batch-size-zero", TE + ["--batch-size", "0"], ["train.batch_size (--batch-size) must be > 0, got 0"]),
    Case("te-batch-size-negative", TE + ["--batch-size", "-4"], ["train.batch_size", "must be > 0, got -4"]),
    Case("te-lr-not-a-number", TE + ["--set", "train.lr=fast"], ["train.lr", "expected a number", "'fast'"]),
    Case("te-set-without-value", TE + ["--set", "train.lr"], ["--set train.lr", "expected key=value"]),
    Case("te-subset-negative", TE + ["--subset", "-1"], ["subset (--subset) must be >= 0"]),
    Case("te-finished-run", TE, ["already holds a finished run", "--resume", "--overwrite"],
         finished_run("eval.json"), left="untouched"),
    Case("te-resume-missing-dir", TE + ["--resume"], ["--resume", "does not exist"]),
    Case("te-resume-and-overwrite", TE + ["--resume", "--overwrite"], ["--resume and --overwrite"]),
    Case("te-resume-without-checkpoint", TE + ["--resume"], ["--resume", "no checkpoint"],
         write("run/config.yaml", "model: x\n"), left="untouched"),
    Case("te-max-length-over-model-limit", TE + ["--max-length", "200"], ["max_length", "64"],
         line(f"{STSB}/sts-dev.csv", 1, f"g\tf\t2012\t1\t2.5\t{long_text()}\ta man")),
    # ------------------------------------------------------------------------------------------------ encode
    Case("enc-missing-input", ENC[:4] + ["{tmp}/nope.txt"] + ENC[5:], ["nope.txt", "file not found"], out="e.npy"),
    Case("enc-empty-input", ENC, ["sentences.txt", "file is empty"], write("data/sentences.txt", "\n \n"),
         out="e.npy"),
    Case("enc-non-utf8", ENC, ["sentences.txt:2", "not valid UTF-8"], bad_bytes("sentences.txt", 2), out="e.npy"),
    Case("enc-batch-size-zero", ENC + ["--batch-size", "0"], ["--batch-size must be > 0, got 0"], out="e.npy"),
    Case("enc-output-not-npy", ENC[:6] + ["{tmp}/e.txt"], ["--output", "e.txt", "expected a .npy"], out="e.txt"),
    Case("enc-unknown-pooling", ENC + ["--pooling", "avg_lst"],
         ["unknown pooler 'avg_lst'", "did you mean 'avg_last'"], out="e.npy"),
    Case("enc-unknown-mode", ENC + ["--mode", "statik"], ["unknown inference mode 'statik'", "did you mean 'static'"],
         out="e.npy"),
    Case("enc-model-without-weights", ["encode", "--model", "{tmp}/noweights"] + ENC[3:],
         ["noweights", "no weights"], model_without_weights, out="e.npy"),
    # ---------------------------------------------------------------------------------------- evaluate sts
    Case("sts-unknown-task", STS + ["--tasks", "stsb,stsbb"], ["unknown STS task 'stsbb'", "did you mean 'stsb'"],
         out="r.json"),
    Case("sts-missing-file", STS, ["STS-B file not found", "sts-test.csv"], rm(f"{STSB}/sts-test.csv"), out="r.json"),
    Case("sts-wrong-delimiter", STS, ["sts-test.csv:2", "expected at least 7 tab-separated fields"],
         line(f"{STSB}/sts-test.csv", 2, "genre,file,2012,1,3.0,a man,a dog"), out="r.json"),
    Case("sts-nan-score", STS, ["sts-test.csv:4", "expected a finite score"],
         line(f"{STSB}/sts-test.csv", 4, "g\tf\t2012\t4\tinf\ta man\ta dog"), out="r.json"),
    Case("sts-batch-size-zero", STS + ["--batch-size", "0"], ["--batch-size must be at least 1, got 0"], out="r.json"),
    Case("sts-unknown-mode", STS + ["--mode", "fulll"], ["unknown inference mode 'fulll'", "did you mean 'full'"],
         out="r.json"),
    Case("sts-bad-split", STS + ["--split", "tst"], ["--split", "invalid choice: 'tst'"], out="r.json"),
    Case("sts-sickr-missing", STS + ["--tasks", "sickr"], ["SICK test file not found"], out="r.json"),
    # ---------------------------------------------------------------------------------- evaluate retrieval
    Case("ret-missing-dataset", RET + ["--dataset", "{tmp}/nope.tsv"], ["nope.tsv", "retrieval data not found"],
         out="r.json"),
    Case("ret-quora-bad-label", RET + ["--dataset", "{tmp}/quora_duplicate_questions.tsv"],
         ["quora_duplicate_questions.tsv:3", "expected is_duplicate 0 or 1, got 'yes'"],
         write("quora_duplicate_questions.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
               "0\t1\t2\ta man\ta dog\t1\n1\t3\t4\ta cat\ta car\tyes\n"), out="r.json"),
    Case("ret-bad-format", RET + ["--dataset", "{tmp}/x.tsv", "--format", "csv"], ["--format", "invalid choice"],
         out="r.json"),
    # -------------------------------------------------------------------------------------- evaluate space
    Case("space-too-few-sentences", SPACE[:-4] + ["--sentences", "1", "--output", "{out}"],
         ["--sentences must be at least 2, got 1"], out="r.json"),
    Case("space-stsb-missing", SPACE, ["STS-B file not found"], rm(f"{STSB}/sts-test.csv"), out="r.json"),
    # --------------------------------------------------------------------------------------------- finetune
    Case("ft-unknown-task", FT + ["--task", "sst"], ["unknown task 'sst'", "did you mean 'sst2'"]),
    Case("ft-unknown-strategy", FT + ["--dropout", "atendout"],
         ["unknown dropout strategy 'atendout'", "did you mean 'attendout'"]),
    Case("ft-missing-train", FT, ["no sst2 train file found", "SST-2/train.tsv"], rm(f"{SST}/train.tsv")),
    Case("ft-missing-column", FT, ["train.tsv:1", "header lacks column(s) 'sentence'"],
         line(f"{SST}/train.tsv", 1, "text\tlabel")),
    Case("ft-wrong-field-count", FT, ["train.tsv:4", "expected 2 tab-separated fields, got 3"],
         line(f"{SST}/train.tsv", 4, "a man\t1\textra")),
    Case("ft-out-of-range-label", FT, ["dev.tsv:3", "bad label '2'", "expected one of 0, 1"],
         line(f"{SST}/dev.tsv", 3, "a man plays\t2")),
    Case("ft-non-utf8", FT, ["train.tsv", "UTF-8"], bad_bytes(f"{SST}/train.tsv", 5)),
    Case("ft-stsb-nan-score", FT + ["--task", "stsb"], ["sts-train.csv:2", "expected a numeric score", "'NaN'"],
         line(f"{STSB}/sts-train.csv", 2, "g\tf\t2012\t2\tNaN\ta man\ta dog")),
    Case("ft-batch-size-zero", FT + ["--batch-size", "0"], ["train.batch_size", "must be > 0, got 0"]),
    Case("ft-config-typo-key", FT + ["--config", "{tmp}/ft.json"],
         ["ft.json: unknown key 'drop.rat'", "did you mean 'drop.rate'"], write("ft.json", '{"drop": {"rat": 0.2}}')),
    Case("ft-finished-run", FT, ["already holds a finished run", "--resume", "--overwrite"],
         finished_run("results.json"), left="untouched"),
]


@pytest.fixture
def ctx(tmp_path: Path, tiny_bert: Path) -> Ctx:
    return Ctx(tmp_path, write_data(tmp_path / "data"), tiny_bert, tmp_path / "run")


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_table_is_large_and_covers_every_command():
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)
    commands = {c.argv[0] if c.argv[0] != "evaluate" else f"evaluate {c.argv[1]}" for c in CASES}
    assert commands >= {"train-embed", "encode", "evaluate sts", "evaluate retrieval", "evaluate space", "finetune"}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_bad_input(case: Case, ctx: Ctx, capsys):
    ctx.out = ctx.tmp / case.out
    if case.setup:
        case.setup(ctx)
    before = snapshot(ctx.out) if ctx.out.is_dir() else None
    code, out, err = run_cli(ctx.fmt(case.argv), capsys)
    assert "Traceback" not in err
    errors = error_lines(err)
    assert len(errors) == 1, err
    prefix = f"layerwise {case.argv[0]}" + (f" {case.argv[1]}" if case.argv[0] == "evaluate" else "")
    assert (errors[0].startswith(f"{prefix}: error: ")
            or errors[0].startswith(f"layerwise {case.argv[0]}: error: ")), errors
    for expected in case.expect:
        assert expected in errors[0], f"{expected!r} not in {errors[0]!r}"
    assert code == 2
    if case.left == "absent":
        assert not ctx.out.exists(), f"{ctx.out} was left behind: {sorted(p.name for p in ctx.out.iterdir())}"
    else:
        assert snapshot(ctx.out) == before, "a pre-existing run directory was modified"
    assert not list(ctx.tmp.glob("*.tmp*")), "a temporary file was left behind"


# -------------------------------------------------------------------------------- valid but awkward inputs


def test_train_embed_accepts_bom_crlf_blank_lines_and_long_texts(ctx: Ctx, capsys):
    """SNLI files with a BOM, CRLF and trailing blank lines; STS-B with blank lines between rows; texts longer than
    --max-length (truncated)."""
    snli = ctx.data / "senteval" / "SNLI"
    edit_lines(snli / "s2.dev", 1, long_text())
    for name in ("s1.dev", "s2.dev", "labels.dev"):
        as_bom_crlf(snli / name)  # trailing blank line only: the three files stay aligned
    as_bom_crlf(ctx.data / "stsbenchmark" / "sts-dev.csv", blank_every=3)
    code, out, err = run_cli(ctx.fmt(TE + ["--max-length", "32"]), capsys)
    assert code == 0, err
    assert (ctx.out / "eval.json").is_file()
    results = json.loads((ctx.out / "eval.json").read_text(encoding="utf-8"))
    assert results["trained"]["full"]["stsb_dev"]["n"] == 16  # the blank lines are not pairs


def test_train_embed_overwrite_replaces_a_finished_run_and_resume_leaves_it(ctx: Ctx, capsys):
    finished_run("eval.json")(ctx)
    code, out, err = run_cli(ctx.fmt(TE + ["--overwrite"]), capsys)
    assert code == 0, err
    assert "finished" not in json.loads((ctx.out / "eval.json").read_text(encoding="utf-8"))
    before = snapshot(ctx.out)
    code, out, err = run_cli(ctx.fmt(TE + ["--resume"]), capsys)  # a finished run: reported, left as it is
    assert code == 0, err
    assert "already finished" in out
    assert snapshot(ctx.out) == before


def test_encode_accepts_bom_crlf_and_blank_lines(ctx: Ctx, capsys):
    path = ctx.data / "sentences.txt"
    as_bom_crlf(path, blank_every=2)
    output = ctx.tmp / "e.npy"
    code, out, err = run_cli(ctx.fmt(ENC[:6] + [str(output)]), capsys)
    assert code == 0, err
    matrix = np.load(output)
    assert matrix.shape[0] == 10  # blank lines skipped, the BOM not part of the first sentence
    plain = ctx.tmp / "plain.txt"
    plain.write_text(path.read_text(encoding="utf-8-sig").replace("\r\n", "\n"), encoding="utf-8")
    code, _, err = run_cli(ctx.fmt(["encode", "--model", "{model}", "--input", str(plain), "--output",
                                    str(ctx.tmp / "p.npy")]), capsys)
    assert code == 0, err
    np.testing.assert_allclose(np.load(ctx.tmp / "p.npy"), matrix, atol=1e-6)


def test_encode_truncates_texts_longer_than_the_model_limit(ctx: Ctx, capsys):
    (ctx.data / "sentences.txt").write_text("a man\n" + long_text() + "\n", encoding="utf-8")
    code, out, err = run_cli(ctx.fmt(ENC[:6] + [str(ctx.tmp / "e.npy")]), capsys)
    assert code == 0, err
    assert np.load(ctx.tmp / "e.npy").shape[0] == 2


def test_evaluate_sts_accepts_bom_crlf_and_blank_lines(ctx: Ctx, capsys):
    path = ctx.data / "stsbenchmark" / "sts-test.csv"
    ctx.out = ctx.tmp / "r.json"
    code, _, err = run_cli(ctx.fmt(STS), capsys)
    assert code == 0, err
    first = json.loads(ctx.out.read_text(encoding="utf-8"))["results"][0]["scores"]
    as_bom_crlf(path, blank_every=4)
    ctx.out.unlink()
    code, _, err = run_cli(ctx.fmt(STS), capsys)
    assert code == 0, err
    again = json.loads(ctx.out.read_text(encoding="utf-8"))["results"][0]["scores"]
    assert first["tasks"]["stsb"]["n"] == again["tasks"]["stsb"]["n"] == 16
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)  # NaN-safe equality


def test_finetune_accepts_bom_crlf_and_blank_lines(ctx: Ctx, capsys):
    for split in ("train", "dev"):
        as_bom_crlf(ctx.data / "glue" / "SST-2" / f"{split}.tsv", blank_every=5)
    code, out, err = run_cli(ctx.fmt(FT), capsys)
    assert code == 0, err
    assert (ctx.out / "results.json").is_file()


# ------------------------------------------------------------------------------------ the real CLI process


@pytest.mark.parametrize("argv, expect", [
    (["train-embed", "--data-dir", "{data}", "--model", "{model}", "--output-dir", "{out}", "--batch-size", "0"],
     "train.batch_size (--batch-size) must be > 0"),
    (["evaluate", "sts", "--model", "{model}", "--data-dir", "{data}", "--tasks", "sts17"],
     "unknown STS task 'sts17'"),
    (["encode", "--model", "{model}", "--input", "{data}/missing.txt", "--output", "{out}.npy"],
     "missing.txt: file not found"),
], ids=["train-embed", "evaluate-sts", "encode"])
def test_subprocess_prints_one_line_and_exits_2(argv, expect, ctx: Ctx):
    command = python_cli(*ctx.fmt(argv))
    if argv[0] == "encode":  # `python -m layerwise` (the package's __main__) behaves as `-m layerwise.cli`
        command[command.index("layerwise.cli")] = "layerwise"
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = error_lines(proc.stderr)
    assert len(errors) == 1 and expect in errors[0], proc.stderr
    assert not ctx.out.exists()


def test_truncation_is_reported_once(ctx: Ctx, capsys, recwarn):
    snli = ctx.data / "senteval" / "SNLI"
    for k in (1, 2, 3):
        edit_lines(snli / "s2.dev", k, long_text())
    code, out, err = run_cli(ctx.fmt(TE + ["--max-length", "32"]), capsys)
    assert code == 0, err
    messages = [str(w.message) for w in recwarn] + (out + err).splitlines()
    messages = [m for m in messages if str(ctx.tmp) not in m]  # the test's own tmp path says "truncation"
    assert sum("truncat" in m for m in messages) == 1, messages
