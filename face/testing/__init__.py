"""Stand-ins for an LLM endpoint that the project starts itself, for tests, benchmarks and checks:

* ``replay`` -- the replay judge: the FACE authors' released judgements served over HTTP (``llm=replay``);
* ``scripted`` -- a deterministic OpenAI-compatible server with scripted answers and injected faults
  (``llm=scripted``);
* ``faults.FaultProxy`` -- a proxy in front of any endpoint that injects transport and answer faults.

Production code never imports this package (the layers contract in ``pyproject.toml`` says so); a run reaches
these servers only through ``llm.server._target_`` in its config."""
