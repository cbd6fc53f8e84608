"""swe_gym: tasks, sandboxes, agent tools, grading and rewards for software-engineering RL.

Importing the package registers the Gymnasium ids (``SWEStarter-v0``, ``SWERebench-v0``, ...)
and does nothing else.
"""

from swe_gym import registration as _registration
from swe_gym.errors import SWEGymError, TaskError
from swe_gym.tasks import Task, load_tasks

_registration.register_all()

__version__ = "0.1.0"
__all__ = ["SWEGymError", "Task", "TaskError", "load_tasks"]
