"""The student model in plain torch, as the grader runs it (this module imports torch).

``mw_actors.editing`` itself never loads torch; a program that needs the student's
forward pass (the grader, ``bench/editing.py``) imports it from here.
"""

from ._model import load_student

__all__ = ["load_student"]
