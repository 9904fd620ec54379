"""Public test doubles and hypothesis strategies for PTE users' own tool catalogues.

Like httpx's MockTransport and structlog.testing, these are product, not test scaffolding:
`FakeOpenAIServer` is an OpenAI-compatible server on loopback with scripted answers, and
the strategies generate valid plans, invalid plans of each kind, and arbitrary planner text.
"""

from __future__ import annotations

from pte.testing._openai_server import FakeOpenAIServer, Reply

__all__ = ["FakeOpenAIServer", "Reply"]
