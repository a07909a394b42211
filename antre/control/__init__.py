"""The operator's controls: pause and resume (``pause``), cancel a running job (``cancel``),
purge (``purge``), paced bulk tasks (``bulk``), edit-and-replay (``edit``), redrive
(``redrive``), resolving abandoned records (``abandoned``).

May import every room below it: ``antre.engine``, ``antre.limits``, ``antre.groups``,
``antre.stores``, ``antre.observe``. Never ``antre.app``.
"""
