"""``python -m face.testing.scripted --port P --log FILE [--latency 0.1 --fault-rate 0.2]``."""
from .server import main

main()
