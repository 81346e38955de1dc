import sys
from pathlib import Path

# let tests import the shared conventions module
sys.path.insert(0, str(Path(__file__).parent))
