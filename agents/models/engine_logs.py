"""Where the inference engine's (vLLM's) log lines go: a log file, and the terminal only when asked.

vLLM logs through the ``vllm`` logger, by default INFO and up to stdout, so a training run's
progress bar and table drown in them. vLLM (re)configures that logger with
``logging.config.dictConfig`` whenever an engine starts, in this process and in any engine
process it spawns, from its ``LoggingConfig``. So the routing is given twice: to this process at
once (:func:`route_engine_logs`, which also catches what vLLM logs while it is imported), and to
vLLM as a dictConfig file (:func:`engine_logging_kwargs`) that it applies at each start, in
whichever process that is. ``verbose`` adds the terminal back (stdout, vLLM's own default).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ENGINE_LOG = "engine.log"  # in the run folder (the trainers) or the --out folder (evaluate)
LOGGER = "vllm"
FORMAT = "%(asctime)s %(process)d %(levelname)s [%(name)s] %(message)s"


def _level() -> str:
    # vLLM's own variable for its level; the routing does not change what is logged, only where
    return os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper()


def logging_dict(log_file: str | Path, verbose: bool = False) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` that sends the ``vllm`` logger to ``log_file`` (appended)
    and, with ``verbose``, to stdout too; no other logger is touched."""
    handlers: dict[str, Any] = {
        "engine_log": {
            "class": "logging.FileHandler",
            "filename": str(Path(log_file).resolve()),
            "mode": "a",
            "encoding": "utf-8",
            "formatter": "engine",
        }
    }
    if verbose:
        handlers["terminal"] = {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stdout",
            "formatter": "engine",
        }
    return {
        "version": 1,
        "disable_existing_loggers": False,  # True would silence every other logger
        "formatters": {"engine": {"format": FORMAT}},
        "handlers": handlers,
        "loggers": {LOGGER: {"handlers": list(handlers), "level": _level(), "propagate": False}},
    }


def route_engine_logs(log_file: str | Path, verbose: bool = False) -> None:
    """Send the ``vllm`` logger to ``log_file`` (and stdout with ``verbose``) in this process,
    replacing its handlers (so a second engine's run folder takes over from the first's)."""
    path = Path(log_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(LOGGER)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    formatter = logging.Formatter(FORMAT)
    targets: list[logging.Handler] = [logging.FileHandler(path, mode="a", encoding="utf-8")]
    if verbose:
        targets.append(logging.StreamHandler(sys.stdout))
    for handler in targets:
        handler.setFormatter(formatter)
        logger.addHandler(handler)
    logger.setLevel(_level())
    logger.propagate = False
    if not verbose:  # vLLM's own deprecation notices about its dependencies, at import
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm(\.|$)")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"vllm(\.|$)")


@contextmanager
def engine_stderr(log_file: str | Path | None, verbose: bool = False) -> Iterator[None]:
    """While an engine starts, what native code writes to standard error (torch's C++ warnings,
    e.g. the CPU backend's NUMA binding notice) goes to ``log_file`` too, unless ``verbose``.
    File descriptor 2 itself is redirected: those lines never pass through Python."""
    if log_file is None or verbose:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log_file, "ab") as fh:
            os.dup2(fh.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


@contextmanager
def engine_logging_kwargs(log_file: str | Path | None, verbose: bool = False) -> Iterator[dict]:
    """``vllm.LLM`` keyword arguments that keep this routing when the engine starts: its
    ``logging_config`` (a dictConfig file, removed on leaving: vLLM reads it during the start)
    and, unless ``verbose``, no weight-loading progress bars. Nothing without a ``log_file``, or
    when the user turned vLLM's logging configuration off (``VLLM_CONFIGURE_LOGGING=0``)."""
    if log_file is None or os.environ.get("VLLM_CONFIGURE_LOGGING", "1") == "0":
        yield {}
        return
    from vllm.config.logging import LoggingConfig

    fd, name = tempfile.mkstemp(prefix="vllm-logging-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(logging_dict(log_file, verbose), fh)
        config = LoggingConfig(configure_logging=True, pylogging_config_file=name)
        yield {"logging_config": config, "use_tqdm_on_load": verbose}
    finally:
        os.unlink(name)
