"""Typed configuration: dataclasses, YAML/JSON files, `--set key=value` overrides, clear validation errors.

A command's options are the fields of its dataclass (nested dataclasses give dotted keys such as
`train.lr`). Precedence: dataclass defaults < `--config FILE` < explicit command-line flags < `--set`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import yaml

from layerwise.errors import ConfigError, closest_hint

C = TypeVar("C")


def default_data_dir() -> str:
    """$LAYERWISE_DATA, else ../shared/data (relative to the working directory)."""
    import os

    return os.environ.get("LAYERWISE_DATA", "../shared/data")


@dataclasses.dataclass
class TrainingConfig:
    """Options of the training loop shared by train-embed and finetune."""

    epochs: float = 1.0  # passes over the training data (fractions allowed)
    max_steps: int = 0  # optimizer steps; 0: derived from epochs
    batch_size: int = 64  # examples per step and process
    lr: float = 2e-5  # peak learning rate of the encoder (AdamW)
    weight_decay: float = 0.0  # AdamW weight decay
    warmup_ratio: float = 0.1  # linear warmup over this fraction of the steps, then linear decay
    max_grad_norm: float = 1.0  # gradient clipping (0: off)
    grad_accum: int = 1  # batches accumulated per optimizer step
    eval_every: int = 100  # steps; 0: once per epoch
    log_every: int = 10  # steps between metrics.jsonl lines
    seed: int = 0  # seeds Python, numpy, torch and the data order
    keep_last: int = 1  # periodic checkpoints kept besides best
    checkpoint_every: int = 0  # steps; 0: at every evaluation
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    on_nan: Literal["stop", "skip"] = "stop"  # a NaN/inf loss stops the run (exit 3) or skips the batch
    progress: bool = True  # show the progress bar
    report_to: list[str] = dataclasses.field(default_factory=list)  # besides metrics.jsonl: tensorboard, wandb

    def validate(self) -> None:
        positive(self, "batch_size", "grad_accum", "log_every", prefix="train.")
        non_negative(self, "epochs", "max_steps", "eval_every", "weight_decay", "max_grad_norm", "keep_last",
                     "checkpoint_every", prefix="train.")
        if self.lr <= 0:
            raise ConfigError(f"train.lr must be > 0, got {self.lr}")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"train.warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.epochs == 0 and self.max_steps == 0:
            raise ConfigError("train.epochs and train.max_steps are both 0: nothing to train")
        from layerwise.training.reporting import check_reporters

        check_reporters(self.report_to)  # unknown name or missing package: fail before a run starts


def positive(obj: Any, *names: str, prefix: str = "") -> None:
    """Raise ConfigError naming the option when a field is not > 0."""
    for name in names:
        if getattr(obj, name) <= 0:
            raise ConfigError(f"{prefix}{name} (--{name.replace('_', '-')}) must be > 0, got {getattr(obj, name)}")


def non_negative(obj: Any, *names: str, prefix: str = "") -> None:
    """Raise ConfigError naming the option when a field is < 0."""
    for name in names:
        if getattr(obj, name) < 0:
            raise ConfigError(f"{prefix}{name} (--{name.replace('_', '-')}) must be >= 0, got {getattr(obj, name)}")


# ---------------------------------------------------------------------------------------------- values


def _convert(value: Any, hint: Any, key: str) -> Any:
    """Convert a parsed YAML/CLI value to the field's type, or raise ConfigError naming the key."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: bad value {value!r}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: expected one of {', '.join(map(str, args))}, "
                              f"got {value!r}{closest_hint(str(value), map(str, args))}")
        return value
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()] if value.strip() else []
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_convert(v, args[0], key) for v in value] if args else list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on", "false", "no", "0", "off"):
            return value.lower() in ("true", "yes", "1", "on")
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if hint in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            number = hint(value) if not isinstance(value, str) else hint(float(value)) if hint is float else int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected {'an integer' if hint is int else 'a number'}, got {value!r}") from None
        if hint is int and isinstance(value, float) and value != int(value):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if hint is float and number != number:
            raise ConfigError(f"{key}: expected a number, got NaN")
        return number
    if hint is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    return value


def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def field_keys(cls: type, prefix: str = "") -> dict[str, Any]:
    """Every dotted key of a (nested) config dataclass mapped to its type hint."""
    keys: dict[str, Any] = {}
    for name, hint in _hints(cls).items():
        if dataclasses.is_dataclass(hint):
            keys.update(field_keys(hint, f"{prefix}{name}."))
        else:
            keys[f"{prefix}{name}"] = hint
    return keys


def _apply(obj: Any, key: str, value: Any, source: str) -> None:
    """Set a dotted key on a nested dataclass instance, converting and checking the value."""
    keys = field_keys(type(obj))
    if key not in keys:
        raise ConfigError(f"{source}: unknown key '{key}'{closest_hint(key, keys)}")
    *parents, leaf = key.split(".")
    target = obj
    for part in parents:
        target = getattr(target, part)
    setattr(target, leaf, _convert(value, keys[key], f"{source}: {key}"))


def _flatten(mapping: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, dict) and value and not key.endswith("kwargs"):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON config file into a flat {dotted key: value} mapping."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--config {path}: file not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))  # YAML is a superset of JSON
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f"{path}:{line + 1}" if line is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML/JSON ({getattr(exc, 'problem', exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of option names to values")
    return _flatten(data)


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one `--set key=value` (the value is read as YAML: numbers, booleans, lists)."""
    if "=" not in text:
        raise ConfigError(f"--set {text}: expected key=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def build_config(cls: type[C], file_values: dict[str, Any] | None = None, cli_values: dict[str, Any] | None = None,
                 overrides: list[str] | None = None, source: str = "config") -> C:
    """Defaults, then file values, then explicit CLI values, then --set overrides; then validate."""
    config = cls()
    for key, value in (file_values or {}).items():
        _apply(config, key, value, source)
    for key, value in (cli_values or {}).items():
        _apply(config, key, value, "option")
    for text in overrides or []:
        key, value = parse_override(text)
        _apply(config, key, value, "--set")
    validate(config)
    return config


def validate(config: Any) -> None:
    """Call `validate()` on the config and on each nested config dataclass."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            validate(value)
    if hasattr(config, "validate"):
        config.validate()


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def save_config(config: Any, path: Path) -> None:
    """Write the resolved config as YAML (temp file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(to_dict(config), sort_keys=False), encoding="utf-8")
    tmp.replace(path)


def config_hash(config: Any) -> str:
    """A short stable hash of the resolved config (used to key runs)."""
    import hashlib

    text = json.dumps(to_dict(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# ------------------------------------------------------------------------------------------ argparse


def _flag(key: str) -> str:
    return ("--" + key.split(".")[-1].replace("_", "-") if key.count(".") <= 1
            else "--" + key.replace(".", "-").replace("_", "-"))


def add_config_arguments(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """Add --config, --set and one flag per config key (nested keys use their leaf name when unique)."""
    parser.add_argument("--config", metavar="FILE", help="YAML or JSON file with options (dotted or nested keys)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override any config key, e.g. --set train.lr=3e-5 (repeatable)")
    defaults = cls()
    keys = field_keys(cls)
    leaves = [k.split(".")[-1] for k in keys]
    used: set[str] = set()
    for key, hint in keys.items():
        if key in skip:
            continue
        leaf = key.split(".")[-1]
        flag = "--" + (leaf if leaves.count(leaf) == 1 else key.replace(".", "-")).replace("_", "-")
        if flag in used:
            continue
        used.add(flag)
        default = defaults
        for part in key.split("."):
            default = getattr(default, part)
        choices = get_args(hint) if get_origin(hint) is Literal else None
        parser.add_argument(flag, dest=f"cfg__{key.replace('.', '__')}", default=None, metavar=_metavar(hint),
                            choices=choices, help=_help(cls, key, default))


def field_comments(cls: type) -> dict[str, str]:
    """The trailing `# comment` of each field in a config dataclass's source: the --help text of its flag.

    A comment too long for one line continues on the comment-only lines right below it that are indented deeper
    than the field (joined with spaces).
    """
    import inspect
    import re

    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments = {}
    for m in re.finditer(r"^([ \t]+)(\w+):[^#\n]*#\s*(.+)$((?:\n\1[ \t]+#.*)*)", source, re.M):
        more = [line.split("#", 1)[1].strip() for line in m.group(4).splitlines() if line.strip()]
        comments[m.group(2)] = " ".join([m.group(3).strip(), *more])
    return comments


def _help(cls: type, key: str, default: Any) -> str:
    owner = cls
    *parents, leaf = key.split(".")
    for part in parents:
        owner = _hints(owner)[part]
    comment = field_comments(owner).get(leaf, "")
    return f"{comment + '; ' if comment else ''}{key} (default: {default})".replace("%", "%%")


def _metavar(hint: Any) -> str:
    if hint is bool:
        return "BOOL"
    if hint in (int, float):
        return "N"
    return "VALUE"


def config_from_args(cls: type[C], args: argparse.Namespace, base_file: Path | None = None) -> C:
    """Build a config from parsed arguments produced by add_config_arguments.

    `base_file` (a resumed run's config.yaml) takes the place of --config when given.
    """
    source = base_file or getattr(args, "config", None)
    file_values = read_config_file(source) if source else {}
    cli_values = {
        name[len("cfg__"):].replace("__", "."): value
        for name, value in vars(args).items()
        if name.startswith("cfg__") and value is not None
    }
    return build_config(cls, file_values, cli_values, getattr(args, "overrides", []),
                        source=str(source) if source else "config")
