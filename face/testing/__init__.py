"""Stand-ins for an LLM that the project starts itself: the replay judge (``face.testing.replay``, the FACE
authors' released judgements served over HTTP). The scripted server and the fault proxy still live in
``face.llm`` (``scripted``, ``faultproxy``)."""
