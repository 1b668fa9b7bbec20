"""The pure agent core: plans as data, and the agent as an action/observation state machine.

Nothing in this package performs I/O; see :mod:`onebox.agent.actions` for the protocol a
driver (``onebox.runtime``, or :func:`onebox.testing.run_agent_offline`) implements.
"""

from onebox.agent.actions import Action, Decision, Finish, Observation
from onebox.agent.loop import Agent
from onebox.agent.plan import Plan, Step, load_plan, parse_plan
from onebox.agent.state import AgentConfig

__all__ = [
    "Action", "Agent", "AgentConfig", "Decision", "Finish", "Observation", "Plan", "Step",
    "load_plan", "parse_plan",
]
