import sys
from pathlib import Path

# test helper modules (storecheck, plugins_for_tests) import as top-level modules
sys.path.insert(0, str(Path(__file__).parent))
