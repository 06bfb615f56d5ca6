"""Shared by the journal tests."""


def whole(recovered) -> list:
    """A queue's recovered messages decoded whole: (msg_id, message, redelivered), in order."""
    return [(msg_id, recovered.message(ref), redelivered)
            for msg_id, _size, _priority, _expiration, redelivered, ref in recovered]
