"""gpgan-train as one process of an mpiexec run, with a fault on rank 1 only (for test_parallel).

    mpiexec -n 2 python faulty_rank.py MODE GPGAN_TRAIN_ARGS...

MODE: "build" (rank 1 cannot read its data), "raise:N" (rank 1 raises in generator step N),
"kill:N" (rank 1 is killed outright in generator step N).
"""
import os
import signal
import sys

from mpi4py import MPI

from gpgan.cli.train import main
from gpgan.train import loop, parallel

mode, argv = sys.argv[1], sys.argv[2:]
if MPI.COMM_WORLD.Get_rank() == 1:
    if mode == "build":
        def no_data(config, progress=True):
            raise FileNotFoundError("test: rank 1 sees no data set")
        loop.build_components = no_data
    else:
        what, at = mode.split(":")
        original = parallel.DataParallelStep.__call__

        def faulty(self, inputs):
            if self.step + 1 == int(at):
                if what == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError(f"test: rank 1 fails in step {at}")
            return original(self, inputs)
        parallel.DataParallelStep.__call__ = faulty
sys.exit(main(argv))
