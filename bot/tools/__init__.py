"""The tools the model may call during a turn, one record each.

Public: `tool` (what a tool is: the `Tool` record, the `ToolTurn` a call gets, the prompt
forms), `toolbox` (the list of tools, the schemas and token text derived from it, and
`Toolbox`, one turn's dispatch) and `text_calls` (calls a model wrote as text, which its server
did not parse). Each tool's own module (`edit_memory`, `search_history`,
`remind`) and the guard of a turn's memory edits (`held`) are the package's own.
"""

__all__ = ["text_calls", "tool", "toolbox"]
