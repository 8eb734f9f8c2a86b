"""Is version B better than version A? Systems compared with statistics: ``face compare`` and ``face.compare``.

    import face
    comp = face.compare("runs/v1", "runs/v2")   # face evaluate outputs, run files, MLflow run ids, face.Result
    comp.verdicts()                            # per aspect: difference, CI, p (Holm), better / worse / no detectable
    comp.report("comparison.html")             # comp.to_markdown(), comp.means, comp.differences, comp.ranking

Modules: ``runs`` (what is read), ``checks`` (what may be compared), ``stats`` (bootstrap, tests, Holm, power),
``engine`` (the comparison), ``moved`` (what moved), ``comparison`` / ``report`` / ``figures`` (outputs), ``cli``
(``face compare``), ``mlflow_io``. Reference: docs/comparing_systems.md.

``face.compare`` and ``face.Comparison`` are ``engine.compare`` and ``comparison.Comparison`` (``face`` imports them
on first use); this package imports nothing itself, so that ``face --help`` loads only ``cli``.
"""
