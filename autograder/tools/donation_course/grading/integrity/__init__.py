"""Sandbox and integrity: the static scan before any kernel starts (scan.py, its data in scan_policy.py),
the kernel launcher's caps (kernel.py) and bubblewrap's sandbox (sandbox.py), the runtime audit inside every
grading kernel (audit.py, its data in audit_policy.py, its log read and pass lines signed in audit_log.py),
and each lesson's reference part set aside unrun (reference_part.py)."""
