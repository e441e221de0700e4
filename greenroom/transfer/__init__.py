"""Moving sessions in and out of a greenroom store: ``greenroom import docker-agent``
(docker-agent's session database), ``greenroom export`` and ``greenroom import jsonl``
(greenroom's own JSON lines). Decision 0029 says what maps to what and what is not carried over.

The package: ``_cli`` (the commands' options, light, and their run), ``_run`` (import and
export against an open store), ``_docker_agent_db`` (reading docker-agent's SQLite file,
read-only, a page at a time), ``_docker_agent_map`` (its values to greenroom's session JSON),
``_jsonl`` (the export's line format).
"""

from ._cli import add_transfer_parsers as add_transfer_parsers, transfer_main as transfer_main

__all__ = ["add_transfer_parsers", "transfer_main"]
