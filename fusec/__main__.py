import sys

from fusec.cli import main

sys.exit(main())
