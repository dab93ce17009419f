"""The referee's messages (grading/referee/wire.py): each kind travels as one JSON line and reads back as the
same typed message; a line a child writes that is none of the kinds (a cut line, a pickle, a forged shape) is
dropped, never unpickled or run; a server line that is not the message the client waits for is refused."""
import pickle

import pytest

from donation_course.grading.referee.verdict import FAIL, PASS, Verdict
from donation_course.grading.referee.wire import (
    AnswerDone,
    Compiled,
    Ready,
    Reply,
    Request,
    from_child,
    line,
    read_ready,
    read_reply,
    read_request,
)


class Runs:
    """Unpickling it would call os.system: a line must never be unpickled."""

    def __reduce__(self):
        import os

        return os.system, ("echo ran",)


def test_each_kind_reads_back_as_itself_from_its_one_line():
    verdict = Verdict("worked example", FAIL, "it donates nothing.\nsecond line")
    for message in (AnswerDone(0), AnswerDone(3), Compiled("k" * 64, "AAAA"), verdict):
        text = line(message)
        assert text.endswith(b"\n") and text.count(b"\n") == 1
        assert from_child(text) == message
    assert read_ready(line(Ready())) == Ready()
    reply = Reply((verdict, Verdict("values", PASS, "ok")), 0.25)
    assert read_reply(line(reply)) == reply
    request = read_request(line(Request({"exercise": {"programs": []}, "capstone": None}, 8, 2048)))
    assert (request.answers, request.seconds, request.memory_mb) == ({"exercise": {"programs": []},
                                                                      "capstone": None}, 8, 2048)
    assert read_request(b'{"answers": {}}\n').seconds == Request({}).seconds  # the limits it does not say


@pytest.mark.parametrize("text", [
    b'{"done": 0',                                      # cut by a kill
    b'{"done": "0"}', b'{"done": true}', b'{"done": 0, "check": "x"}',
    b'{"compiled": "k", "blob": 5}', b'{"compiled": 5, "blob": "AAAA"}', b'{"compiled": "k"}',
    b'{"check": "values", "outcome": "pass"}',            # a verdict without its message
    b'["check", "values"]', b'"pass"', b"null", b"",
    pickle.dumps(Runs()),                               # a pickle: data it never reads as one
    pickle.dumps(Verdict("values", PASS, "forged")),
])
def test_a_line_that_is_none_of_the_kinds_is_dropped(text, capfd):
    assert from_child(text + b"\n") is None
    assert "ran" not in capfd.readouterr().out


@pytest.mark.parametrize("read, text", [
    (read_ready, b'{"ready": false}\n'), (read_ready, b'{"verdicts": [], "seconds": 1}\n'),
    (read_ready, pickle.dumps(Ready())),
    (read_reply, b'{"verdicts": [{"check": "x"}], "seconds": 1}\n'),
    (read_reply, b'{"verdicts": "all pass", "seconds": 1}\n'),
    (read_reply, b'{"seconds": 1}\n'), (read_reply, b'{"verdicts": [], "seconds": "1"}\n'), (read_reply, b"[]\n"),
    (read_reply, pickle.dumps(Reply((), 1.0))),
])
def test_a_server_line_that_is_not_the_awaited_message_is_refused(read, text):
    with pytest.raises(ValueError):
        read(text)
