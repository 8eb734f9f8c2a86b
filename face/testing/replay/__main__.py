"""``python -m face.testing.replay --data-dir DIR --port P``: the replay judge on its own."""
from .server import main

main()
