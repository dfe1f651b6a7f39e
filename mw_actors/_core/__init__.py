"""The engine room: actors, mailboxes, supervisors, clock, journal.

Private: import from ``mw_actors``.
"""
