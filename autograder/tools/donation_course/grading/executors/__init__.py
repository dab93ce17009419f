"""Executing: the two executors that grade each student with nbgrader in process (worker.py), and the one
set of messages between the run and them (protocol.py). The local pool (pool.py) forks long-lived workers
from the run's own process; on a Dask cluster (cluster.py) each worker is admitted and served by
cluster_worker.py, gets the course as a bundle (bundle.py) and forks its grading processes from a zygote
(zygote.py, grader_process.py), its figures in cluster_log.py. Scratch folders name their owner
(scratch.py); fastkernel.py is the grading kernel's client."""
