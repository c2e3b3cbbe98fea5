"""Former home of the loss-study report section, now :mod:`seps.report.loss_study`.

Kept so that ``from seps.loss_study import ...`` (scripts, notebooks, the tests) goes on
working; new code imports from :mod:`seps.report.loss_study`.
"""

from .report.loss_study import *  # noqa: F403
from .report.loss_study import __all__  # noqa: F401
