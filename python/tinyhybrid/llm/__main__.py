import sys

from tinyhybrid.llm.cli import main

sys.exit(main())
