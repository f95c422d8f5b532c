import sys

from fedkrr._src.cli import main

sys.exit(main())
