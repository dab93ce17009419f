"""Clean a cell's output of what tells about the machine that built the site:
its paths, its user's name and home, its host name, and dates and times.

- A path into an environment's packages keeps only what follows
  `site-packages/` (`site-packages/jax/_src/api.py`); a path into the
  standard library keeps what follows `lib/pythonX.Y/`.
- A path inside the repository becomes relative to it (`src/donation_lab/memory.py`).
- The home folder becomes `~`; a temporary file becomes `<tmp>/NAME`.
- A log line's date, time and thread id (abseil/glog `E1127 02:34:12.478609  30180 file.cc:3073]`,
  as XLA writes them) go: `E file.cc:3073]`.
- An ISO date or date-time becomes `<date>`.
- The user's name and the host's name, where they still appear as a word, become `<user>` and `<host>`.
"""
import getpass
import os
import re
import socket
from pathlib import Path

LOG_PREFIX = re.compile(r"\b([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ([\w.\-]+:\d+\])")
ISO_DATE = re.compile(r"\b\d{4}-\d\d-\d\d(?:[ T]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?\b")
PATH_CHARS = r"[^\s'\"():,<>\[\]/]"  # one path segment
SITE_PACKAGES = re.compile(rf"(?:/{PATH_CHARS}+?)*?/(?:site|dist)-packages/")
STDLIB = re.compile(rf"(?:/{PATH_CHARS}+?)*?/lib/(python3\.\d+)/")
TEMP = re.compile(rf"(?:/tmp|/var/tmp|/var/folders)(?:/{PATH_CHARS}+)*?/({PATH_CHARS}+)(?=[\s'\":,)<]|$)", re.M)


class Scrubber:
    """One machine's facts, and the text cleaned of them."""

    def __init__(self, root: Path, home: Path | None = None, user: str | None = None, host: str | None = None):
        self.root = str(Path(root).resolve())
        self.home = str(home if home is not None else Path.home())
        self.user = user if user is not None else _user()
        self.host = host if host is not None else socket.gethostname()

    def __call__(self, text: str) -> str:
        text = LOG_PREFIX.sub(r"\1 \2", text)
        text = ISO_DATE.sub("<date>", text)
        text = SITE_PACKAGES.sub("site-packages/", text)
        text = STDLIB.sub(r"\1/", text)
        for root in {self.root, os.path.realpath(self.root)}:
            text = text.replace(root + "/", "").replace(root, ".")
        text = TEMP.sub(r"<tmp>/\1", text)
        if len(self.home) > 1:
            text = text.replace(self.home, "~")
        for word, mark in ((self.user, "<user>"), (self.host, "<host>")):
            if word and len(word) > 2:
                text = re.sub(rf"(?<![\w-]){re.escape(word)}(?![\w-])", mark, text)
        return text

    def leftovers(self, text: str) -> list[str]:
        """What of this machine is still in `text` (for the build's own check of every page)."""
        found = [what for what, value in (("the repository's path", self.root), ("the home folder", self.home))
                 if len(value) > 1 and value in text]
        found += [f"a date ({m.group()})" for m in ISO_DATE.finditer(text)]
        found += [f"a log line's time ({m.group()})" for m in LOG_PREFIX.finditer(text)]
        return found


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""
