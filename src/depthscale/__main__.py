import sys

from depthscale.cli import main

sys.exit(main())
