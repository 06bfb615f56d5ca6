"""Shared by the journal tests."""

import os


def whole(recovered) -> list:
    """A queue's recovered messages decoded whole: (msg_id, message, redelivered), in order."""
    return [(msg_id, recovered.message(ref), redelivered)
            for msg_id, _size, _priority, _expiration, redelivered, ref in recovered]


def segment_files(directory) -> list[tuple[int, bytes]]:
    """The journal's segment files in `directory` as `journal_index.replay` takes them."""
    out = []
    for name in os.listdir(directory):
        if name == "messages.journal":
            out.append((0, name))
        elif name.startswith("messages.journal.") and name.rsplit(".", 1)[1].isdigit():
            out.append((int(name.rsplit(".", 1)[1]), name))
    return [(n, open(os.path.join(directory, name), "rb").read()) for n, name in sorted(out)]
