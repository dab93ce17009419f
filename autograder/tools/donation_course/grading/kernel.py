"""Kernel launcher used at grading time: caps the kernel's address space
(RLIMIT_AS, from DONATION_LAB_MEMORY_MB) and then exec's a normal ipykernel.
A submission that allocates too much gets a MemoryError in its own cell
instead of taking the machine (or the other workers) down."""
import os
import resource
import sys


def main() -> None:
    mb = int(os.environ.get("DONATION_LAB_MEMORY_MB", "0") or 0)
    if mb > 0:
        limit = mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *sys.argv[1:]])


if __name__ == "__main__":
    main()
