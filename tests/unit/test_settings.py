"""The typed settings: what loading yields, where each value came from, and the key table read
from the Settings class itself. Real files in a temporary directory; no engine."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Literal, Optional, get_type_hints

import pytest

from pinctl.config import files as config_files
from pinctl.config import loader as config
from pinctl.config.loader import Config, PatternEntry
from pinctl.config.settings import DIALECTS, KEYS, PATTERNS_KEY, KeySpec, Settings, key_table, setting


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    """Never read the machine's /etc, and act as a user other than root."""
    monkeypatch.setattr(config, "DEFAULT_PATH", str(tmp_path / "etc-default" / "config.toml"))
    monkeypatch.setattr(config_files, "_euid", lambda: 1000)


def write(path: pathlib.Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def toml(value: Any) -> str:
    return config._toml_literal(list(value) if isinstance(value, tuple) else value)


# Three different valid values of each key type, for the file, the environment and the flag.
def three_values(spec: KeySpec) -> list[Any]:
    if spec.type == "list":
        return [("file-a", "file-b"), ("env-a",), ("flag-a", "flag-b")]
    if spec.type == "choice":
        assert len(spec.choices) >= 2
        return [spec.choices[1], spec.choices[0], spec.choices[1]]
    if spec.type == "number":
        low, high = spec.bounds or (0.5, 100.0)
        return [low, high, (low + high) / 2]
    return ["/run/from-file.sock", "/run/from-env.sock", "/run/from-flag.sock"]


def env_text(spec: KeySpec, value: Any) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(value)


REPLACED = [spec for spec in KEYS.values() if not spec.accumulates]


# -- the settings object -------------------------------------------------------------------


def test_loading_yields_frozen_typed_settings_with_the_declared_defaults() -> None:
    cfg = config.load({}, {})
    assert isinstance(cfg.settings, Settings)
    assert cfg.settings == Settings()
    for spec in KEYS.values():
        assert getattr(cfg.settings, spec.name) == spec.default
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.settings.timeout = 5.0  # type: ignore[misc]


def test_every_value_has_its_declared_type(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, "".join(f"{spec.name} = {toml(spec.example)}\n" for spec in KEYS.values()))
    settings = config.load({}, {}, config_path=str(main)).settings
    assert isinstance(settings.namespaces, tuple) and all(isinstance(ns, str) for ns in settings.namespaces)
    assert isinstance(settings.docker_pinned_image_labels, tuple)
    assert isinstance(settings.pinned_images, tuple)
    assert isinstance(settings.timeout, float)  # written as an integer in the example
    assert settings.pattern_dialect in DIALECTS
    for spec in KEYS.values():
        value = getattr(settings, spec.name)
        assert value == (tuple(spec.example) if isinstance(spec.example, tuple) else spec.example), spec.name


def test_flags_given_as_click_tuples_become_tuples() -> None:
    settings = config.load({"namespaces": ("a", "b"), "timeout": 1}, {}).settings
    assert settings.namespaces == ("a", "b") and settings.timeout == 1.0 and isinstance(settings.timeout, float)


# -- where each value came from ------------------------------------------------------------


@pytest.mark.parametrize("spec", REPLACED, ids=lambda spec: spec.name)
def test_each_source_overrides_the_one_below_and_says_so(tmp_path: pathlib.Path, spec: KeySpec) -> None:
    file_value, env_value, flag_value = three_values(spec)
    main = tmp_path / "config.toml"
    path = write(main, f"{spec.name} = {toml(file_value)}\n")
    env = {spec.env: env_text(spec, env_value)} if spec.env else {}
    flags = {spec.name: flag_value} if spec.flag else {}

    def loaded(**kwargs: Any) -> tuple[Any, str, bool]:
        cfg = config.load(kwargs.get("flags", {}), kwargs.get("env", {}), config_path=kwargs.get("path"))
        return getattr(cfg.settings, spec.name), cfg.sources[spec.name], cfg.defaulted(spec.name)

    assert loaded() == (spec.default, "default", True)
    assert loaded(path=path) == (file_value, path, False)
    if spec.env:
        assert loaded(path=path, env=env) == (env_value, f"env {spec.env}", False)
    if spec.flag:
        assert loaded(path=path, env=env, flags=flags) == (flag_value, "flag", False)


def test_sources_cover_every_key_but_the_patterns() -> None:
    cfg = config.load({}, {})
    assert set(cfg.sources) == set(KEYS) - {PATTERNS_KEY}
    assert set(cfg.shown()) == set(cfg.sources)
    with pytest.raises(TypeError):
        cfg.sources["timeout"] = "flag"  # type: ignore[index]


def test_pinned_images_are_the_own_texts_and_the_patterns_carry_their_places(tmp_path: pathlib.Path) -> None:
    main = tmp_path / "config.toml"
    write(main, 'pinned_images = ["example.test/file/*"]\n')
    crio = tmp_path / "crio.conf"
    write(crio, '[crio.image]\npinned_images = ["example.test/crio"]\n')
    cfg = config.load({"pinned_images": ["example.test/flag"]}, {"PINCTL_PINNED_IMAGES": "example.test/env"},
                      config_path=str(main), from_crio=str(crio))
    assert cfg.settings.pinned_images == ("example.test/file/*", "example.test/env", "example.test/flag")
    assert cfg.patterns == [
        PatternEntry("example.test/file/*", f"{main}:1", "pinctl"),
        PatternEntry("example.test/env", "env PINCTL_PINNED_IMAGES", "pinctl"),
        PatternEntry("example.test/flag", "flag --pinned-image", "pinctl"),
        PatternEntry("example.test/crio", f"crio {crio}", "crio"),
    ]


def test_shown_pairs_each_value_with_its_source(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path / "config.toml", 'namespaces = ["k8s.io"]\n')
    shown = config.load({"timeout": 3.0}, {}, config_path=path).shown()
    assert shown["namespaces"] == config.Value(("k8s.io",), path)
    assert shown["timeout"] == config.Value(3.0, "flag")
    assert shown["docker_host"] == config.Value(None, "default")


def test_a_config_can_be_built_by_hand() -> None:
    cfg = Config(Settings(timeout=9.0), {"timeout": "flag"}, [], [])
    assert cfg.settings.timeout == 9.0 and not cfg.defaulted("timeout")
    assert cfg.shown() == {"timeout": config.Value(9.0, "flag")}


# -- the key table ----------------------------------------------------------------------------


def test_the_table_is_the_settings_attributes_in_order() -> None:
    assert list(KEYS) == [attribute.name for attribute in dataclasses.fields(Settings)]
    hints = get_type_hints(Settings)
    kinds = {"list": tuple[str, ...], "str": str, "optional-str": Optional[str], "number": float}
    for spec in KEYS.values():
        if spec.type == "choice":
            assert hints[spec.name] == Literal[spec.choices]
        else:
            assert hints[spec.name] == kinds[spec.type], spec.name


def test_the_dialect_is_a_choice_of_the_dialects() -> None:
    assert KEYS["pattern_dialect"].type == "choice" and KEYS["pattern_dialect"].choices == DIALECTS


def test_an_annotation_without_a_key_type_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Odd:
        retries: int = setting(3, help="Tries.", example=4)

    with pytest.raises(TypeError, match="retries"):
        key_table(Odd)


def test_a_new_attribute_is_a_new_key() -> None:
    @dataclasses.dataclass(frozen=True)
    class More(Settings):
        max_age: float = setting(60.0, help="Seconds an image may go unused.", example=90.0, flag="--max-age",
                                 metavar="SECONDS", env="PINCTL_MAX_AGE")

    table = key_table(More)
    assert list(table)[:-1] == list(KEYS) and table["max_age"].type == "number"
    assert table["max_age"].option_help == ("Seconds an image may go unused. Default: $PINCTL_MAX_AGE, "
                                            "config 'max_age', else 60.")
