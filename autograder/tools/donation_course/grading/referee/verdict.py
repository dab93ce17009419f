"""One verdict of the referee on one check (no JAX here: the worker reads verdicts too)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

PASS, FAIL, UNJUDGED = "pass", "fail", "unjudged"


@dataclass(frozen=True)
class Verdict:
    check: str
    outcome: str   # PASS: the program does it; FAIL: it refutes it; UNJUDGED: nothing the referee could run
    message: str   # for the learner: what passed, why it failed or was not judged

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Verdict:
        return cls(str(data["check"]), str(data["outcome"]), str(data["message"]))
