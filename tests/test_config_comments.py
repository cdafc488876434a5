"""Config dataclass field comments become the --help text of their flags, continuation lines included."""
from __future__ import annotations

from dataclasses import dataclass

from layerwise.config import field_comments
from layerwise.training.embed import EmbedConfig


@dataclass
class _Sample:
    short: int = 1  # one line
    long: str = ""  # first part,
                    # second part
    # a section comment, not part of any field's help
    after: bool = False  # own text


def test_field_comments_join_deeper_indented_continuations():
    comments = field_comments(_Sample)
    assert comments == {"short": "one line", "long": "first part, second part", "after": "own text"}


def test_wrapped_help_text_reaches_the_parser():
    assert field_comments(EmbedConfig)["dataset"].endswith("e.g. sentence-transformers/all-nli:triplet")
