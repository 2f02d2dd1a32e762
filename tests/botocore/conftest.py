import pathlib
import sys

# The tests import the checker beside them, whatever directory pytest is started from.
sys.path.insert(0, str(pathlib.Path(__file__).parent))
