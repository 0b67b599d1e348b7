"""gpgan-train whose image metrics use the tests' stand-in network, slowed during training to
$SLOW_EVAL_SECONDS an image (for test_ablate: an evaluation that outlasts gpgan-ablate's grace
period, as a CIFAR evaluation on a CPU does). The first such batch creates the file
$SLOW_EVAL_MARK. $GPGAN_INCEPTION_WEIGHTS must name an existing file (the stand-in does not read it).

    python slow_evaluation.py GPGAN_TRAIN_ARGS...
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: helpers

from gpgan.cli.train import main  # noqa: E402
from gpgan.metrics.inception import InceptionV3  # noqa: E402
from helpers import PixelNetwork  # noqa: E402


class SlowNetwork(PixelNetwork):
    def batch_features(self, images):
        # Training has begun when the loop's handler has replaced Python's own: the reference's
        # features, taken before, go at full speed.
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            open(os.environ["SLOW_EVAL_MARK"], "a").close()
            time.sleep(float(os.environ["SLOW_EVAL_SECONDS"]) * len(images))
        return super().batch_features(images)


net = SlowNetwork()
InceptionV3.load = classmethod(lambda cls, *args, **kwargs: net)
sys.exit(main(sys.argv[1:]))
