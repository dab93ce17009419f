"""The lessons' kernel: ipykernel's own, reporting Python as major.minor.

JupyterLab writes the kernel's `language_info` into a notebook it opens and
marks the notebook modified when that changes anything. ipykernel reports the
patch release (3.12.1 here, another 3.12.x on Binder or a learner's machine),
so lessons committed once would open modified wherever the patch differs. This
kernel reports "3.12", the version the course pins, and is otherwise
ipykernel's. binder/lesson-kernel makes it the learner environment's `python3`
kernel; tests/test_notebook_format.py checks that the lessons carry what it
reports.

Run as `python -m donation_lab.kernel -f CONNECTION_FILE`, as
`python -m ipykernel_launcher` is.
"""

import sys
from pathlib import Path

if __name__ == "__main__" and sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
    # As ipykernel_launcher does: the working folder leaves sys.path while the
    # kernel loads, so a learner's file cannot shadow ipykernel (IPython puts
    # the folder back for the learner's code).
    del sys.path[0]

from ipykernel.ipkernel import IPythonKernel  # noqa: E402

LANGUAGE_VERSION = "{}.{}".format(*sys.version_info[:2])


class LessonKernel(IPythonKernel):
    language_info = {**IPythonKernel.language_info, "version": LANGUAGE_VERSION}


if __name__ == "__main__":
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(kernel_class=LessonKernel)
