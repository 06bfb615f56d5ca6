"""Hypothesis example counts for tests/fifo; FIFO_EXAMPLES raises them for long runs."""
import os

EXAMPLES = int(os.environ.get("FIFO_EXAMPLES", "40"))
