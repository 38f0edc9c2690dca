import sys

from batchfuzz.cli import main

if __name__ == "__main__":  # also imported, not run, by the worker processes' fork server
    sys.exit(main())
