"""The fault suite: hostile and duplicated messages, concurrent delivery, a database restart.

``make test`` runs a small budget (tests/faults/test_faults.py); ``make faults`` runs the full one
(``python -m tests.faults --budget full``) and prints one summary line per check.
"""
