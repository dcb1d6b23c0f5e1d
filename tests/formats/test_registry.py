"""Config formats are declared once (formats/registry.py): readers, writers, detection and the CLI's choices."""

from pathlib import Path

import pytest

from paraplan.errors import ConfigError
from paraplan.formats import EMIT_FORMATS, FORMATS, READ_FORMATS, canonical_format, detect_format
from paraplan.formats.registry import ConfigFormat, detect

DATA = Path(__file__).parent / "data"


def test_every_declared_format_resolves_its_reader_and_writer() -> None:
    for fmt in FORMATS.values():
        if fmt.reads:
            assert callable(fmt._function("read")), fmt.name
        if fmt.writes:
            assert callable(fmt.writer()), fmt.name
    assert set(READ_FORMATS) == {f.name for f in FORMATS.values() if f.reads}
    assert set(EMIT_FORMATS) == {f.name for f in FORMATS.values() if f.writes}


def test_aliases_and_unknown_names() -> None:
    for fmt in FORMATS.values():
        for alias in fmt.aliases:
            assert canonical_format(alias.upper()) == fmt.name
    with pytest.raises(ConfigError, match="unknown config format 'foo': choose one of megatron"):
        canonical_format("foo")


@pytest.mark.parametrize(
    ("suffix", "text", "expected"),
    [
        (".toml", "x = 1", "torchtitan"),
        (".json", "{}", "hf"),
        ("", '{"hidden_size": 1}', "hf"),
        ("", "[training]\nsteps = 1", "torchtitan"),
        ("", "--tensor-model-parallel-size 2", "megatron"),
        (".yaml", "modules:\n  pre_trainer: {}", "primus"),
        (".yaml", "trainer: {devices: 8}", "nemo"),
        (".yaml", "- not a mapping", "megatron"),
        ("", ": : not yaml [", "megatron"),
    ],
)
def test_detection_follows_the_table(suffix: str, text: str, expected: str) -> None:
    assert detect(suffix, text) == expected


def test_example_files_are_detected_as_their_folder() -> None:
    for folder in ("megatron", "primus", "torchtitan", "nemo"):
        for path in sorted((DATA / folder).glob("*")):
            if path.is_file() and path.suffix in (".sh", ".txt", ".yaml", ".toml"):
                assert detect_format(path) == folder, path


def test_a_format_that_cannot_write_says_so() -> None:
    fmt = ConfigFormat("probe", "probe format", "hf", writes=False)
    with pytest.raises(ConfigError, match="cannot write probe format"):
        fmt.writer()
