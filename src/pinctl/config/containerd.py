"""containerd's config file as pinctl reads it: its CRI sandbox image, containerd 2.x's own
pinned_images and the schema version it declares."""

from __future__ import annotations

from typing import Any, Optional

from pinctl.config.files import TOO_DEEP, NotRegularFile, read_regular, toml_reader, unreadable
from pinctl.errors import ConfigError
from pinctl.model import ConfigPin

DEFAULT_CONFIG = "/etc/containerd/config.toml"
# containerd 2.x (config version 3): the CRI's image settings, pinned_images among them.
V3_IMAGES_PLUGIN = "io.containerd.cri.v1.images"


def read_sandbox_image(config_path: Optional[str]) -> Optional[str]:
    """The CRI sandbox image from containerd's config (schema 1, 2 or 3); None when unset."""
    read = _read_config(config_path)
    return None if read is None else _sandbox_from_config(read[1])


def read_config_pins(config_path: Optional[str]) -> list[ConfigPin]:
    """Every string entry of containerd 2.x's ``[plugins.'io.containerd.cri.v1.images'.pinned_images]``
    (``sandbox`` included: it is the sandbox image there), in the file's order; none when unset."""
    read = _read_config(config_path)
    if read is None:
        return []
    path, config = read
    images = _table(_table(config, "plugins"), V3_IMAGES_PLUGIN)
    return [ConfigPin(str(name), ref, path) for name, ref in _table(images, "pinned_images").items()
            if isinstance(ref, str) and ref]


def read_config_version(config_path: Optional[str]) -> tuple[str, Optional[int]]:
    """containerd's config path and the schema `version` it declares: 1 when it has none (as
    containerd reads it), None when the default file is not there or the value is no number."""
    read = _read_config(config_path)
    if read is None:
        return config_path or DEFAULT_CONFIG, None
    version = read[1].get("version", 1)
    return read[0], version if type(version) is int else None


def _read_config(config_path: Optional[str]) -> Optional[tuple[str, dict[str, Any]]]:
    """(path, parsed TOML) of containerd's config; None when the default one is absent or unreadable.

    Only a regular file is read (a FIFO would block). It is not held to root's ownership as
    pinctl's own config is: pinctl acts on no pin it names (sync and prune never read it), and
    containerd reads it as it is.
    """
    explicit = config_path is not None
    path = config_path or DEFAULT_CONFIG
    fix = "fix --containerd-config"
    try:
        raw = read_regular(path)
    except (FileNotFoundError, PermissionError) as err:
        if explicit:
            raise unreadable(err, "containerd config", path, fix) from None
        return None
    except (OSError, NotRegularFile) as err:
        raise unreadable(err, "containerd config", path, fix) from None
    try:
        config = toml_reader().loads(raw.decode("utf-8"))
    except ValueError as err:
        raise ConfigError(f"containerd config {path} is not valid TOML: {err}", "fix the file") from None
    except RecursionError:
        raise ConfigError(f"containerd config {path}: {TOO_DEEP}", "fix the file") from None
    return path, config


def _table(parent: Any, key: str) -> dict[str, Any]:
    # A key holding something other than a table (a hand-edited config) reads as absent.
    found = parent.get(key) if isinstance(parent, dict) else None
    return found if isinstance(found, dict) else {}


def _sandbox_from_config(config: dict[str, Any]) -> Optional[str]:
    plugins = _table(config, "plugins")
    candidates = [
        _table(_table(plugins, V3_IMAGES_PLUGIN), "pinned_images").get("sandbox"),
        _table(plugins, "io.containerd.grpc.v1.cri").get("sandbox_image"),
        _table(plugins, "cri").get("sandbox_image"),
    ]
    return next((c for c in candidates if isinstance(c, str) and c), None)
