"""gpgan-train as one process of an mpiexec run whose image metrics use the tests' stand-in
network, rank 0 sending itself a Ctrl-C during an evaluation (for test_parallel).

    mpiexec -n 2 python interrupted_evaluation.py AT GPGAN_TRAIN_ARGS...

AT: rank 0 sends itself a SIGINT as the network's AT-th batch begins (0: never). The
environment names an existing file in GPGAN_INCEPTION_WEIGHTS (the stand-in does not read it).
"""
import os
import signal
import sys

from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: helpers

from gpgan.cli.train import main  # noqa: E402
from gpgan.metrics.inception import InceptionV3  # noqa: E402
from helpers import PixelNetwork  # noqa: E402

at, argv = int(sys.argv[1]), sys.argv[2:]


class InterruptingNetwork(PixelNetwork):
    calls = 0

    def batch_features(self, images):
        self.calls += 1
        if self.calls == at and MPI.COMM_WORLD.Get_rank() == 0:
            os.kill(os.getpid(), signal.SIGINT)
        return super().batch_features(images)


net = InterruptingNetwork()
InceptionV3.load = classmethod(lambda cls, *args, **kwargs: net)
sys.exit(main(argv))
