"""trident.dist: this process's place in the job. Under ``mpirun``, ``srun`` or ``trident launch`` each
process is a rank of MPI's world; run alone it is rank 0 of 1."""

from __future__ import annotations

from . import _trident


def rank() -> int:
    """This process's rank in the job (0 alone)."""
    return _trident.dist_rank()


def world_size() -> int:
    """The job's process count (1 alone)."""
    return _trident.dist_world_size()


def launched_by_mpi() -> bool:
    """Whether mpirun, srun or trident launch started this process as a rank of a job."""
    return _trident.dist_launched_by_mpi()


def barrier() -> None:
    """Waits until every rank calls it (collective)."""
    _trident.dist_barrier()


def is_main_process() -> bool:
    """Rank 0: the one that prints and writes shared files."""
    return rank() == 0


__all__ = ["rank", "world_size", "launched_by_mpi", "barrier", "is_main_process"]
