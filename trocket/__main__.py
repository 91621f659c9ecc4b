import sys

from trocket.cli import main

sys.exit(main())
