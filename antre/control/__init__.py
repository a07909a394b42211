"""The operator's controls: pause and resume (``pause``), cancel a running job (``cancel``),
purge (``purge``), paced bulk tasks (``bulk``), retention (``retention``) and periodic
schedules (``periodic``).

May import every room below it: ``antre.engine``, ``antre.scheduling``, ``antre.stores``,
``antre.observe``. Never ``antre.app``.
"""
