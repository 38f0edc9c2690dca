import sys

from batchfuzz.cli import main

sys.exit(main())
