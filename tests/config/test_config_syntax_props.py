"""Property tests of the rabbitmq.conf syntax: values survive quoting, comments never leak in."""

from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_broker.config import parse_text
from amqp_broker.config.lexer import tokenize

# Printable text without line breaks, quotes or '#'; may have inner spaces.
_plain = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="#'"),
                 min_size=1, max_size=20)
_words = st.lists(_plain, min_size=1, max_size=3).map(" ".join)


@settings(max_examples=100, deadline=None)
@given(value=_words, comment=st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=15),
       pad=st.sampled_from(["", " ", "\t", "  "]))
def test_unquoted_value_then_comment(value, comment, pad):
    entries, problems = tokenize(f"{pad}default_pass{pad}={pad}{value}{pad}#{comment}\n", "f")
    assert problems == [] and [e.value for e in entries] == [value]


@settings(max_examples=100, deadline=None)
@given(value=st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters="'"),
                     max_size=20))
def test_quoted_value_is_kept_verbatim(value):
    assert parse_text(f"default_pass = '{value}'  # c\n").default_pass == value


@settings(max_examples=50, deadline=None)
@given(port=st.integers(0, 65535), name=st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True))
def test_listener_port_round_trips(port, name):
    s = parse_text(f"listeners.tcp.{name} = 127.0.0.1:{port}\n")
    assert (s.host, s.port) == ("127.0.0.1", port)
