import pytest

from pinctl.pins import labels


def test_only_exact_key_and_value_pin() -> None:
    assert labels.carries_pin({"io.cri-containerd.pinned": "pinned"})
    assert not labels.carries_pin({"io.cri-containerd.pinned": "true"})
    assert not labels.carries_pin({"io.cri.containerd.pinned": "pinned"})


def test_wrong_value_is_ineffective() -> None:
    problems = labels.ineffective_pins({"io.cri-containerd.pinned": "true"})
    assert problems == ["io.cri-containerd.pinned=true: the value must be 'pinned'"]


@pytest.mark.parametrize("key", ["io.cri.containerd.pinned", "io.cri-containerd.pined", "IO.CRI-CONTAINERD.PINNED", "io.cricontainerd.pinned"])
def test_misspelt_keys_are_reported(key: str) -> None:
    [problem] = labels.ineffective_pins({key: "pinned"})
    assert "misspelt" in problem and key in problem


@pytest.mark.parametrize("key", ["io.cri-containerd.image", "org.example.pinned-by", "pinned"])
def test_unrelated_labels_are_not_reported(key: str) -> None:
    assert labels.ineffective_pins({key: "x"}) == []


def test_a_real_pin_is_not_ineffective() -> None:
    assert labels.ineffective_pins({"io.cri-containerd.pinned": "pinned"}) == []


@pytest.mark.parametrize(
    "version, honours",
    [("1.6.20~ds1", False), ("1.6.24", False), ("1.6.25", True), ("1.7.0", False), ("1.7.9", False),
     ("1.7.10", True), ("1.7.24~ds1", True), ("v2.0.0", True), ("2.1.3", True), ("1.5.9", False), ("devel", True)],
)
def test_cri_honours_pins_from_the_fixed_releases(version: str, honours: bool) -> None:
    assert labels.cri_honours_pins(version) is honours
