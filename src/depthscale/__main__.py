import sys

from depthscale.cli.main import main

sys.exit(main())
