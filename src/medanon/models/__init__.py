"""Neural network modules (``nn.Module`` definitions only; training lives in :mod:`medanon.train`)."""
