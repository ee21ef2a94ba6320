"""Ask a language model from code: the model of the client that sent this run (MCP sampling).

    from codemode import llm
    label = await llm.ask("One word, positive or negative: 'great service'", max_tokens=5)

    import asyncio
    a, b = await asyncio.gather(llm.ask("Summarize: ..."), llm.ask("Translate: ..."))

Each call counts against the run's caps on llm calls and answer tokens (SandboxLimitError
when they are used up). Without a model to ask (a client without sampling, or the CLI)
it raises SamplingUnavailableError. The prompt has the host's secrets redacted before it
leaves; the answer is untrusted text, like any tool result.
"""

from __future__ import annotations

import asyncio
import json

from codemode import _host

__all__ = ["ask"]

_MAX_U32 = 2**32 - 1


async def ask(prompt: str, *, system: str | None = None, max_tokens: int = 512) -> str:
    """Asks the client's model and returns its answer as text.

    Args:
        prompt: The question, with any data it needs.
        system: Instructions for the model (a system prompt), or None.
        max_tokens: The longest answer wanted (the run's remaining token budget may lower it).

    Example: ``summary = await llm.ask("Summarize in one line:\\n" + text, max_tokens=60)``
    """
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, not {type(prompt).__name__}")
    if system is not None and not isinstance(system, str):
        raise TypeError(f"system must be a str or None, not {type(system).__name__}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise TypeError(f"max_tokens must be an int, not {type(max_tokens).__name__}")
    if not 1 <= max_tokens <= _MAX_U32:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    loop = asyncio.get_running_loop()
    handle = _host.start_sample(prompt, system or "", max_tokens)
    answer = json.loads(await loop.watch_host_call(handle))  # type: ignore[attr-defined]
    text: str = answer["text"]
    return text
