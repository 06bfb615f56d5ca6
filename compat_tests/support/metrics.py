"""Reading Prometheus text (the broker's /metrics and /metrics/per-object) in tests.

`samples(text)` parses the exposition format into {"name{labels}": value}, failing on any line
that is not a comment or a sample; `scrape(metrics_url, path)` GETs and parses.  Called by
tests/mgmt (metrics tests) and tests/spark (the broker's count of returned messages).
"""

from __future__ import annotations

import re

import httpx

__all__ = ["samples", "scrape"]

_SAMPLE = re.compile(r'^([a-z_]+)(\{[^}]*\})? (-?[0-9.e+-]+)$')


def samples(text: str) -> dict[str, float]:
    """{"name" or "name{labels}": value} for every sample line; a malformed line fails the test."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            m = _SAMPLE.match(line)
            assert m, f"not a Prometheus sample line: {line!r}"
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def scrape(metrics_url: str, path: str = "/metrics") -> dict[str, float]:
    """GET `metrics_url + path` (200 expected) and parse it."""
    r = httpx.get(metrics_url + path, timeout=30)
    assert r.status_code == 200, r.text
    return samples(r.text)
