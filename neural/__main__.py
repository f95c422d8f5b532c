import sys

from neural._src.cli import main

sys.exit(main())
