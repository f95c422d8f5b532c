import sys

from neural._src.cli import main

if __name__ == "__main__":
  sys.exit(main())
