"""The agent's built-in tools, one package each, and what every tool is.

``base`` says what a tool is (``Tool``: its definition for the model, its timeout and
``run``) and what a call gets and returns; ``registry`` says how a tool package declares
itself (``ToolSpec``: its name, its config section, the factory that builds it for a run,
whether its calls need a person's approval) and finds the declared ones. Each built-in tool
is a package here with a ``spec`` module (its ``SPEC``), mostly beside the tool itself:
``message``, ``schedule``, ``web_fetch``, ``web_search``, ``exec``, the memory tools; the five
file tools (``read_file``, ``write_file``, ``edit_file``, ``list_files``, ``search_files``)
share one module, ``workspace_files``, as they share how a path is named and the caps.
``untrusted`` marks what a tool read from outside so that the model takes it as data.
Nothing outside names them: ``agent.tools`` in the config lists the ones a run is offered,
and the daemon builds them through their specs.

This module imports nothing, so the config can list the tools without loading any of them.
"""
