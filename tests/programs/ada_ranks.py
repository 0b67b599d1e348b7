"""gpgan-train as one process of an mpiexec run that records ADA's state on every rank after every
generator step (for test_parallel: every process must hold the same p).

    mpiexec -n 2 python ada_ranks.py DUMP_DIR GPGAN_TRAIN_ARGS...

Each rank writes ``DUMP_DIR/rank<r>.json``: ``[[step, state], ...]``, ``state`` being ADA's
``state_dict()`` (p, rt, signs, images, batches; floats, which JSON keeps exactly).
Reading the state back is a host read of a few scalars after the step: it changes nothing the
step computes.
"""
import json
import os
import sys

from mpi4py import MPI

from gpgan.cli.train import main
from gpgan.train import parallel

dump, argv = sys.argv[1], sys.argv[2:]
states = []
original = parallel.DataParallelStep.__call__


def recording(self, inputs):
    result = original(self, inputs)
    states.append([self.step, self.parts.augment.state_dict()])
    return result


parallel.DataParallelStep.__call__ = recording
status = main(argv)
with open(os.path.join(dump, f"rank{MPI.COMM_WORLD.Get_rank()}.json"), "w") as f:
    json.dump(states, f)
sys.exit(status)
