"""Hypothesis strategies for protocol tests, and the example budget (env PROTOCOL_EXAMPLES)."""

from __future__ import annotations

import datetime
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from pamqp import commands as c

#: Modest by default: 2 CPUs are shared by several engineers.
SETTINGS = settings(
    max_examples=int(os.environ.get("PROTOCOL_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _fits_shortstr(s: str) -> bool:
    return len(s.encode("utf-8")) <= 255


shortstr = st.text(max_size=80).filter(_fits_shortstr) | st.text(
    alphabet="abc.#*-_", min_size=200, max_size=255)
# pamqp validates exchange names when building Basic.Publish (the decoder does not care).
exchange_name = st.text(alphabet="abcXYZ019-_.:@#,/+ ", max_size=127)
tag = st.integers(min_value=0, max_value=2**63 - 1)  # pamqp refuses larger longlongs
u32 = st.integers(min_value=0, max_value=2**32 - 1)
channel = st.integers(min_value=1, max_value=2047)

_scalar = (
    st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.booleans()
    | st.text(max_size=20)
)
headers = st.dictionaries(st.text(max_size=12).filter(_fits_shortstr),
                          _scalar | st.dictionaries(st.text(max_size=5), _scalar, max_size=3),
                          max_size=5)
_nonempty = st.text(min_size=1, max_size=40).filter(_fits_shortstr)
timestamps = st.integers(min_value=0, max_value=2**32 - 1).map(
    lambda s: datetime.datetime.fromtimestamp(s, tz=datetime.UTC))


@st.composite
def properties(draw) -> c.Basic.Properties:
    """Basic.Properties with a random subset of fields set (pamqp skips "" strings)."""
    opt = lambda strat: draw(st.none() | strat)  # noqa: E731
    return c.Basic.Properties(
        content_type=opt(_nonempty),
        content_encoding=opt(_nonempty),
        headers=opt(headers),
        delivery_mode=opt(st.sampled_from([1, 2])),
        priority=opt(st.integers(0, 255)),
        correlation_id=opt(_nonempty),
        reply_to=opt(_nonempty),
        expiration=opt(st.integers(0, 10**9).map(str)),
        message_id=opt(_nonempty),
        timestamp=opt(timestamps),
        message_type=opt(_nonempty),
        user_id=opt(_nonempty),
        app_id=opt(_nonempty),
    )


bodies = st.binary(max_size=3000)
