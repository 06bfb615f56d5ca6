"""Pure routing core: exchanges, bindings, per-vhost topology, policies and typed errors.

No IO, no trio, no clock. The server (``amqp_broker.server``) calls ``Topology`` for every
exchange/queue/binding method and for ``basic.publish`` routing, and turns ``AMQPError`` into
channel or connection closes.
"""

from .bindings import Binding, Dest
from .errors import (
    AccessRefused,
    AMQPError,
    ChannelError,
    CommandInvalid,
    ConnectionForced,
    ContentTooLarge,
    FrameError,
    HardError,
    InternalError,
    InvalidPath,
    NoConsumers,
    NoRoute,
    NotAllowed,
    NotFound,
    NotImplemented_,
    PreconditionFailed,
    ResourceError,
    ResourceLocked,
    SoftError,
    SyntaxError_,
    UnexpectedFrame,
    error_for_code,
)
from .exchanges import EXCHANGE_TYPES, Exchange, headers_match, make_exchange
from .policies import (
    Policy,
    PolicyError,
    PolicyStore,
    QueueSettings,
    effective_definition,
    make_policy,
    resolve_queue_settings,
    select_policy,
)
from .router import STANDARD_EXCHANGES, Topology, Unbound, routing_keys

__all__ = [
    "AMQPError", "AccessRefused", "Binding", "ChannelError", "CommandInvalid", "ConnectionForced",
    "ContentTooLarge", "Dest", "EXCHANGE_TYPES", "Exchange", "FrameError", "HardError",
    "InternalError", "InvalidPath", "NoConsumers", "NoRoute", "NotAllowed", "NotFound",
    "NotImplemented_", "PreconditionFailed", "ResourceError", "ResourceLocked",
    "STANDARD_EXCHANGES", "SoftError", "SyntaxError_", "Topology", "Unbound", "UnexpectedFrame",
    "Policy", "PolicyError", "PolicyStore", "QueueSettings", "effective_definition",
    "make_policy", "resolve_queue_settings", "select_policy",
    "error_for_code", "headers_match", "make_exchange", "routing_keys",
]
