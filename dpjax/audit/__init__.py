"""Empirical privacy audits: lower bounds on epsilon from many runs on neighbouring datasets.

* :mod:`dpjax.audit.bounds`: Clopper-Pearson intervals and the empirical
  epsilon lower bound over all thresholds (Jagielski et al. 2020; Nasr et al.
  2021);
* :mod:`dpjax.audit.mechanisms`: the audits of dpjax's shipped mechanisms,
  channel by channel, with worst-case canaries, and their deliberately
  broken twins (half the noise; twice the sensitivity). It is the entry
  point, re-exporting what is defined in :mod:`~dpjax.audit.core` (types,
  constants, noise injection), :mod:`~dpjax.audit.datasets` (the neighbouring
  datasets), the builders :mod:`~dpjax.audit.full_batch`,
  :mod:`~dpjax.audit.streams` and :mod:`~dpjax.audit.host`,
  :mod:`~dpjax.audit.registry` (the entries, :func:`make_setup`) and
  :mod:`~dpjax.audit.runner` (:func:`run_audit`, :func:`audit`).

Needs the ``audit`` extra (scipy).
"""

from dpjax.audit import bounds
from dpjax.audit import mechanisms
from dpjax.audit.bounds import EpsilonLowerBound, clopper_pearson, empirical_epsilon
from dpjax.audit.mechanisms import (AuditResult, AuditSetup, audit, injected_noise, make_setup,
                                   run_audit)

__all__ = ["AuditResult", "AuditSetup", "EpsilonLowerBound", "audit", "bounds", "clopper_pearson",
           "empirical_epsilon", "injected_noise", "make_setup", "mechanisms", "run_audit"]
