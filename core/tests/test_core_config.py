"""Config: defaults < file < environment < CLI flags, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_core.commands.config_files import OmniConfig, env_names, load_config, parse_assignments
from omni_core.contract.errors import ConfigError


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "omni.toml"
    path.write_text(text)
    return path


def test_defaults_have_every_section() -> None:
    config = load_config(env={})
    assert isinstance(config, OmniConfig)
    assert config.attention.backend == "auto" and config.engine.max_batch == 4
    assert config.cache.backend is None and config.quantization.method is None
    assert config.parallel.cfg_parallel_size == 1


def test_later_sources_win(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[attention]\nbackend = "sdpa-math"\ncross = "sdpa"\n'
        "[engine]\nmax_batch = 2\nmax_queue = 10\n",
    )
    env = {"OMNI_ENGINE_MAX_BATCH": "6", "OMNI_ATTENTION_BACKEND": "sdpa-cudnn"}
    config = load_config(path, env=env, overrides={"attention.backend": "sdpa-flash"})
    assert config.attention.backend == "sdpa-flash"  # flag > env > file
    assert config.attention.for_role("cross") == "sdpa"  # only the file set it
    assert config.attention.for_role("self") == "sdpa-flash"
    assert config.engine.max_batch == 6  # env > file
    assert config.engine.max_queue == 10  # file > default
    nested = load_config(path, env={}, overrides={"engine": {"max_queue": 3}, "cache": None})
    assert (nested.engine.max_batch, nested.engine.max_queue) == (2, 3)


def test_config_file_from_omni_config_env(tmp_path: Path) -> None:
    path = _write(tmp_path, '[cache]\nbackend = "first-block"\noptions = { threshold = 0.1 }\n')
    config = load_config(env={"OMNI_CONFIG": str(path)})
    assert config.cache.backend == "first-block"
    assert config.cache.options == {"threshold": 0.1}


def test_environment_values_are_parsed_per_field() -> None:
    config = load_config(
        env={
            "OMNI_QUANTIZATION_COMPONENTS": "transformer, transformer_2",
            "OMNI_CACHE_OPTIONS": '{"threshold": 0.2}',
            "OMNI_ENGINE_REQUEST_TIMEOUT_S": "none",
            "OMNI_ATTENTION_JOINT": "sdpa-math",
            "OMNI_PLATFORM": "cpu",  # not a config field: ignored here
        }
    )
    assert config.quantization.components == ("transformer", "transformer_2")
    assert config.cache.options == {"threshold": 0.2}
    assert config.engine.request_timeout_s is None
    assert config.attention.joint_attention == "sdpa-math"
    assert "OMNI_ATTENTION_BACKEND" in env_names()


def test_errors_name_the_field_and_the_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config(env={"OMNI_ENGINE_MAX_BATCH": "many"})
    assert str(excinfo.value).startswith("engine.max_batch: ")
    assert "(from OMNI_ENGINE_MAX_BATCH)" in str(excinfo.value)

    path = _write(tmp_path, "[attention]\nbakend = 'sdpa'\n")
    with pytest.raises(ConfigError) as excinfo:
        load_config(path, env={})
    assert str(excinfo.value) == f"attention.bakend: unknown setting (from config file '{path}')"

    with pytest.raises(ConfigError, match=r"^parallel\.cfg_parallel_size: .*less than or equal"):
        load_config(env={}, overrides={"parallel.cfg_parallel_size": 3})
    with pytest.raises(ConfigError, match=r"^attention\.backend: .*(from command line)"):
        load_config(env={}, overrides={"attention.backend": 5})


def test_bad_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml", env={})
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config(_write(tmp_path, "[attention\n"), env={})
    with pytest.raises(ConfigError, match=r"^turbo: unknown setting"):
        load_config(_write(tmp_path, "[turbo]\non = true\n"), env={})


def test_set_assignments_parse_like_the_environment() -> None:
    assert parse_assignments(["attention.backend=sdpa", "engine.max_batch=8"]) == {
        "attention.backend": "sdpa",
        "engine.max_batch": "8",
    }
    config = load_config(env={}, overrides=parse_assignments(["engine.max_batch=8"]))
    assert config.engine.max_batch == 8
    with pytest.raises(ConfigError, match=r"expected SECTION\.FIELD=VALUE"):
        parse_assignments(["attention.backend"])
    with pytest.raises(ConfigError, match="must start with a section"):
        parse_assignments(["backend=sdpa"])
