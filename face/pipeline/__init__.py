"""The FACE method itself, in the order it runs: decompose turns into particles (``particles``), plan and score
them (``scoring``, records in ``records``), aggregate to turn and dialogue predictions (``aggregate``), what it
will cost (``estimate``); ``method`` composes them as the live method from its parts (``parts``), ``released``
aggregates the authors' released scores."""
