"""``python -m hetgen train …``: hetgen's role launcher (see :mod:`hetgen.launcher`)."""

import sys

from hetgen.launcher import main

sys.exit(main())
