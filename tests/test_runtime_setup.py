"""The command line's process settings (medanon.runtime): logging that follows the current stderr, and the CUDA
flags (set the same way on a CPU-only build, so they are checked here)."""

from __future__ import annotations

import contextlib
import io
import logging

import torch

from medanon import runtime


def test_logging_follows_the_current_stderr_across_commands_in_one_process():
    """gpu_check runs every command in one process with its output redirected to that command's log: each
    command's records must land in its own log, not in the first one's (closed) file."""
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    root.handlers = []
    try:
        logs = []
        for _ in range(2):
            buf = io.StringIO()
            with contextlib.redirect_stderr(buf):
                runtime.setup_logging("info")
                logging.getLogger("medanon.test").warning("into this command's log")
            logs.append(buf.getvalue())
            buf.close()                                     # the next command must not write here
        assert all("into this command's log" in text for text in logs)
        assert sum(isinstance(h, runtime._CurrentStderr) for h in root.handlers) == 1
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            logging.getLogger("medanon.test").warning("third")
        assert "third" in err.getvalue()
    finally:
        root.handlers, root.level = saved, level


def test_logging_leaves_a_callers_handlers_alone():
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    mine = logging.StreamHandler(io.StringIO())
    root.handlers = [mine]
    try:
        runtime.setup_logging("debug")
        assert root.handlers == [mine]
    finally:
        root.handlers, root.level = saved, level


def test_cudnn_benchmark_is_off_unless_asked_for(monkeypatch):
    before = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    try:
        monkeypatch.delenv("MEDANON_CUDNN_BENCHMARK", raising=False)
        monkeypatch.delenv("MEDANON_STRICT_FP32", raising=False)
        runtime.configure_cuda()
        assert not torch.backends.cudnn.benchmark
        assert torch.get_float32_matmul_precision() == "high"
        monkeypatch.setenv("MEDANON_CUDNN_BENCHMARK", "1")
        monkeypatch.setenv("MEDANON_STRICT_FP32", "1")
        runtime.configure_cuda()
        assert torch.backends.cudnn.benchmark
        assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cudnn.allow_tf32
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = before[1], before[2]
