"""Issue 8, part 4: safe loading. Weights come from safetensors (torch.load only with weights_only=True), no remote
code unless the user asks for it, and a model directory is never executed."""
from __future__ import annotations

import ast
import json
import pickle
import shutil
from pathlib import Path


from test_reliability_helpers import REPO, error_lines, run_cli

SRC = REPO / "src" / "layerwise"


def calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def dotted(func: ast.AST) -> str:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    parts.append(func.id if isinstance(func, ast.Name) else "<expr>")  # x().eval() is not the builtin eval
    return ".".join(reversed(parts))


def sources():
    files = sorted(SRC.rglob("*.py"))
    assert files
    for path in files:
        yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_every_torch_load_passes_weights_only_true():
    found = 0
    for path, tree in sources():
        for call in calls(tree):
            if dotted(call.func) == "torch.load":
                found += 1
                kw = {k.arg: k.value for k in call.keywords}
                assert "weights_only" in kw and isinstance(kw["weights_only"], ast.Constant) \
                    and kw["weights_only"].value is True, f"{path}:{call.lineno}: torch.load without weights_only=True"
    assert found >= 1  # the checkpoint loader


def test_no_unsafe_deserialisation_or_code_execution_in_src():
    banned = {"pickle.load", "pickle.loads", "dill.load", "joblib.load", "eval", "exec", "yaml.load",
              "yaml.unsafe_load", "numpy.load", "np.load"}
    for path, tree in sources():
        for call in calls(tree):
            name = dotted(call.func)
            if name in ("np.load", "numpy.load"):
                kw = {k.arg: k.value for k in call.keywords}
                allow = kw.get("allow_pickle")
                assert allow is None or (isinstance(allow, ast.Constant) and allow.value is False), \
                    f"{path}:{call.lineno}: np.load with allow_pickle"
                continue
            assert name not in banned, f"{path}:{call.lineno}: {name}"


def test_trust_remote_code_is_never_on_by_default():
    for path, tree in sources():
        for call in calls(tree):
            for kw in call.keywords:
                if kw.arg == "trust_remote_code":
                    assert not (isinstance(kw.value, ast.Constant) and kw.value.value is True), \
                        f"{path}:{call.lineno}: trust_remote_code=True"
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + list(node.args.defaults) \
                    + list(node.args.kw_defaults)
                for arg, default in zip(args, defaults):
                    if arg.arg == "trust_remote_code":
                        assert isinstance(default, ast.Constant) and default.value is False, \
                            f"{path}:{node.lineno}: {node.name}(trust_remote_code=...) must default to False"


class Marker:
    """Unpickling this creates a marker file (a stand-in for arbitrary code)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def malicious_model_dir(tiny_bert: Path, directory: Path, marker: Path, keep_safetensors: bool) -> Path:
    """tiny_bert plus a booby-trapped pytorch_model.bin and remote-code modules wired into config.json."""
    shutil.copytree(tiny_bert, directory)
    if not keep_safetensors:
        (directory / "model.safetensors").unlink()
    with open(directory / "pytorch_model.bin", "wb") as handle:
        pickle.dump({"embeddings.word_embeddings.weight": Marker(marker.with_suffix(".pickle"))}, handle)
    for name, base in (("modeling_evil", "BertModel"), ("configuration_evil", "BertConfig")):
        (directory / f"{name}.py").write_text(
            f"open({str(marker.with_suffix('.' + name))!r}, 'w').write('ran')\n"
            f"from transformers import {base}\nclass Evil({base}):\n    pass\n", encoding="utf-8")
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    config["auto_map"] = {"AutoConfig": "configuration_evil.Evil", "AutoModel": "modeling_evil.Evil"}
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (directory / "__init__.py").write_text(f"open({str(marker.with_suffix('.init'))!r}, 'w')\n", encoding="utf-8")
    return directory


def markers(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.glob("MARKER*"))


def encode_argv(model: Path, tmp_path: Path) -> list[str]:
    sentences = tmp_path / "s.txt"
    sentences.write_text("a man plays\nthe dog runs\n", encoding="utf-8")
    return ["encode", "--model", str(model), "--input", str(sentences), "--output", str(tmp_path / "e.npy")]


def test_model_dir_with_safetensors_ignores_the_pickle_and_the_code(tiny_bert: Path, tmp_path: Path, capsys):
    model = malicious_model_dir(tiny_bert, tmp_path / "evil", tmp_path / "MARKER", keep_safetensors=True)
    code, _, err = run_cli(encode_argv(model, tmp_path), capsys)
    assert markers(tmp_path) == []
    assert code == 0, err  # the weights come from model.safetensors


def test_model_dir_with_only_a_malicious_pickle_is_not_executed(tiny_bert: Path, tmp_path: Path, capsys):
    model = malicious_model_dir(tiny_bert, tmp_path / "evil", tmp_path / "MARKER", keep_safetensors=False)
    try:
        code, _, err = run_cli(encode_argv(model, tmp_path), capsys)
    except Exception:  # noqa: BLE001 - an unclear error is checked (xfail) below; safety is what counts here
        code = None
    assert markers(tmp_path) == [], "loading the model directory executed its code"
    assert code != 0
    assert not (tmp_path / "e.npy").exists()


def test_model_dir_with_only_a_malicious_pickle_fails_with_one_clear_line(tiny_bert: Path, tmp_path: Path, capsys):
    model = malicious_model_dir(tiny_bert, tmp_path / "evil", tmp_path / "MARKER", keep_safetensors=False)
    code, _, err = run_cli(encode_argv(model, tmp_path), capsys)
    assert code == 2
    [line] = error_lines(err)
    assert "--model" in line and "evil" in line
    assert markers(tmp_path) == []
