"""memsim: GPU memory management in LLM training, simulated (the C library's commands as
Python calls: memsim/api.py)."""
from .api import simulate, compare, replay, plan, Error
