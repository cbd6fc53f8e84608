"""The engine's (vLLM's) log lines go to the run's log file, not the terminal, unless verbose.

A training run's terminal shows its progress bar and table; the ``vllm`` logger's INFO lines and
the "Failed to load weights" warning of every weight push (noise: agents/models/vllm.py) go to
``RUN_DIR/engine.log``. The real engine's routing is checked in test_vllm_model.py.
"""

from __future__ import annotations

import json
import logging
import os
import warnings

import pytest

from agents.models.engine_logs import (
    ENGINE_LOG,
    engine_logging_kwargs,
    engine_stderr,
    logging_dict,
    route_engine_logs,
)

PUSH_WARNING = "RotaryEmbedding: Failed to load weights"


@pytest.fixture(autouse=True)
def vllm_logger():
    """The ``vllm`` logger as it was before the test (other tests start real engines)."""
    logger = logging.getLogger("vllm")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield logger
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        if handler not in saved[0]:
            handler.close()
    for handler in saved[0]:
        logger.addHandler(handler)
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def _log_a_push() -> None:
    # vLLM's own module logger for the reload (a child of "vllm")
    layerwise = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    logging.getLogger("vllm.v1.engine.core").info("Initializing a V1 LLM engine")
    layerwise.warning(PUSH_WARNING)


def _flush(logger: logging.Logger) -> None:
    for handler in logger.handlers:
        handler.flush()


def test_engine_lines_go_to_the_run_log_and_not_the_terminal(tmp_path, capsys, caplog, vllm_logger):
    log_file = tmp_path / "run" / ENGINE_LOG
    route_engine_logs(log_file)
    with caplog.at_level(logging.INFO):
        _log_a_push()
    _flush(vllm_logger)
    text = log_file.read_text()
    assert PUSH_WARNING in text and "Initializing a V1 LLM engine" in text
    assert "WARNING [vllm.model_executor.model_loader.reload.layerwise]" in text
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert not [r for r in caplog.records if r.name.startswith("vllm")]  # nor the root's handlers


def test_verbose_shows_them_on_the_terminal_too(tmp_path, capsys, vllm_logger):
    log_file = tmp_path / ENGINE_LOG
    route_engine_logs(log_file, verbose=True)
    _log_a_push()
    _flush(vllm_logger)
    assert PUSH_WARNING in capsys.readouterr().out
    assert PUSH_WARNING in log_file.read_text()


def test_a_second_run_takes_the_lines_over(tmp_path, vllm_logger):
    first, second = tmp_path / "a" / ENGINE_LOG, tmp_path / "b" / ENGINE_LOG
    route_engine_logs(first)
    route_engine_logs(second)
    _log_a_push()
    _flush(vllm_logger)
    assert first.read_text() == "" and PUSH_WARNING in second.read_text()
    assert len(vllm_logger.handlers) == 1


def test_the_config_for_vllm_routes_only_its_logger_the_same_way(tmp_path):
    config = logging_dict(tmp_path / ENGINE_LOG)
    assert config["disable_existing_loggers"] is False  # True would silence every other logger
    assert list(config["loggers"]) == ["vllm"] and config["loggers"]["vllm"]["propagate"] is False
    assert [h["class"] for h in config["handlers"].values()] == ["logging.FileHandler"]
    verbose = logging_dict(tmp_path / ENGINE_LOG, verbose=True)
    assert [h.get("stream") for h in verbose["handlers"].values()] == [None, "ext://sys.stdout"]
    json.dumps(verbose)  # vLLM reads it from a JSON file


def test_no_log_file_leaves_vllms_own_logging(tmp_path):
    with engine_logging_kwargs(None) as kwargs:
        assert kwargs == {}


@pytest.mark.vllm
@pytest.mark.parametrize("verbose", [False, True])
def test_vllm_applies_the_routing_when_an_engine_starts(tmp_path, capsys, vllm_logger, verbose):
    """What an engine start does with ``logging_config`` (in this process or a spawned one):
    vLLM's own ``configure_logging``, which replaces the ``vllm`` logger's handlers."""
    pytest.importorskip("vllm")
    from vllm.logger import configure_logging

    log_file = tmp_path / ENGINE_LOG
    with engine_logging_kwargs(log_file, verbose) as kwargs:
        assert kwargs["use_tqdm_on_load"] is verbose  # no weight-loading bars unless verbose
        configure_logging(kwargs["logging_config"])
    _log_a_push()
    _flush(vllm_logger)
    assert PUSH_WARNING in log_file.read_text()
    captured = capsys.readouterr()
    assert (PUSH_WARNING in captured.out) is verbose and PUSH_WARNING not in captured.err


@pytest.mark.parametrize("verbose", [False, True])
def test_native_stderr_of_an_engine_start_goes_to_the_log(tmp_path, capfd, verbose):
    # torch's C++ warnings (the CPU backend's NUMA notice) are written to fd 2, not through Python
    log_file = tmp_path / ENGINE_LOG
    with engine_stderr(log_file, verbose):
        os.write(2, b"[W utils.cpp:68] Warning: NUMA binding\n")
    os.write(2, b"after the start\n")  # the terminal is back
    err = capfd.readouterr().err
    assert "after the start" in err
    if verbose:
        assert "NUMA binding" in err and not log_file.exists()
    else:
        assert "NUMA binding" not in err and "NUMA binding" in log_file.read_text()


@pytest.mark.parametrize("verbose", [False, True])
def test_vllm_deprecation_notices_stay_off_the_terminal_unless_verbose(tmp_path, verbose):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        route_engine_logs(tmp_path / ENGINE_LOG, verbose)
        for module in ("vllm.triton_utils.dispatcher", "mypackage.vllm_helpers"):
            warnings.warn_explicit("reduce_op is deprecated", FutureWarning, "x.py", 1, module)
    modules = [str(w.message) for w in seen]
    # a user's own module is never silenced; vLLM's notices only without verbose
    assert len(modules) == (2 if verbose else 1)
