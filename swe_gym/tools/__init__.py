"""Agent tools: action parsing (fenced block / JSON tool call), ``str_replace_editor``, tool docs."""

from swe_gym.tools.docs import system_prompt, task_prompt
from swe_gym.tools.editor import Editor
from swe_gym.tools.parsing import (
    ACTION_FORMATS,
    TOOLS,
    InvalidAction,
    ToolCall,
    format_action,
    parse_action,
)

__all__ = [
    "ACTION_FORMATS",
    "TOOLS",
    "Editor",
    "InvalidAction",
    "ToolCall",
    "format_action",
    "parse_action",
    "system_prompt",
    "task_prompt",
]
